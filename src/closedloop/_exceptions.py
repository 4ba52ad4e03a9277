"""Every error closedloop raises, in one place.

The tree::

    ClosedLoopError
    ├── ConfigurationError (also ValueError)  a bad argument or setting; names it and its value
    │   └── InvalidModelSpecError             a model spec string of no known form
    ├── ModelError                            a model call or model file went wrong
    │   ├── ModelNotAvailableError            the model file is not on disk (says which pull to run)
    │   ├── ModelLoadError                    the file is there but cannot be loaded (corrupt GGUF)
    │   ├── ModelUnreachableError             the server cannot be reached
    │   ├── ModelAuthError                    the server refused the credentials
    │   ├── ModelRateLimitError               the server asked us to slow down (has retry_after)
    │   ├── ModelTimeoutError                 the call ran past its timeout
    │   ├── ContextOverflowError              the prompt does not fit the context window
    │   ├── SchemaCompileError                the grammar compiler rejected a response schema
    │   ├── ModelResponseError                the answer could not be used (bad shape, bad JSON)
    │   ├── TransientModelError               an injected or passing fault; safe to retry
    │   └── RealModelCallBlockedError         a real model was called where only test models may run
    ├── ModelPullError                        fetching or verifying a built-in model failed
    ├── ToolError                             a tool could not be described or called
    ├── SecretUnavailableError                a secret reference could not be resolved (names it)
    ├── ActionError                           an action contract was violated
    │   ├── PreconditionFailedError           the action did not run
    │   ├── PostconditionFailedError          the action ran; its compensation was triggered
    │   ├── ActionTimeoutError                the action ran past its timeout
    │   └── ConfirmationRequiredError         a human must confirm before it runs
    ├── LedgerError                           the effect ledger cannot proceed
    │   └── ReconciliationRequiredError       an effect is pending: it may or may not have happened
    │       └── EffectInFlightError           another owner's live claim holds the effect now
    ├── StateError                            the state store refused an operation
    │   ├── StaleStateError                   compare-and-set lost: the version moved on
    │   │   └── FencedOutError                a newer claim's fencing token took the record over
    │   ├── SessionNotFoundError              no such session (or it expired)
    │   ├── StateSerializationError           the value cannot be stored as JSON
    │   └── StoreUnavailableError             the backing store is down or unwritable
    ├── CircuitOpenError                      a circuit breaker is open; the call was not made
    └── AgentError                            the loop itself could not go on
        ├── InvalidActionError                the model proposed an action that failed validation
        ├── HandoverRequiredError             the task was frozen for a human decision
        └── OutputValidationError             the final answer does not fit the output type

Expected failures of the world (an empty answer, a 503, a drifted format) are not
exceptions: they become scored ``Observation``s the loop can reason about. Exceptions
are for contracts broken by the caller or by infrastructure. Inside a run even those do
not escape: the run ends with halt ``error`` and the exception, as data, in the result's
``error``; only misuse before a run starts (a ``ConfigurationError``) raises.
"""

from __future__ import annotations

from typing import Any

from ._public import present_under

__all__ = [
    "ActionError",
    "ActionTimeoutError",
    "AgentError",
    "CircuitOpenError",
    "ClosedLoopError",
    "ConfigurationError",
    "ConfirmationRequiredError",
    "ContextOverflowError",
    "EffectInFlightError",
    "FencedOutError",
    "HandoverRequiredError",
    "InvalidActionError",
    "InvalidModelSpecError",
    "LedgerError",
    "ModelAuthError",
    "ModelError",
    "ModelLoadError",
    "ModelNotAvailableError",
    "ModelPullError",
    "ModelRateLimitError",
    "ModelResponseError",
    "ModelTimeoutError",
    "ModelUnreachableError",
    "OutputValidationError",
    "PostconditionFailedError",
    "PreconditionFailedError",
    "RealModelCallBlockedError",
    "ReconciliationRequiredError",
    "SchemaCompileError",
    "SecretUnavailableError",
    "SessionNotFoundError",
    "StaleStateError",
    "StateError",
    "StateSerializationError",
    "StoreUnavailableError",
    "ToolError",
    "TransientModelError",
]


class ClosedLoopError(Exception):
    """Base of every error raised by closedloop."""


class ConfigurationError(ClosedLoopError, ValueError):
    """A bad argument or setting. The message names the argument and the value given."""

    def __init__(self, argument: str, value: Any, reason: str) -> None:
        self.argument = argument
        self.value = value
        self.reason = reason
        super().__init__(f"{argument}={value!r}: {reason}")


class InvalidModelSpecError(ConfigurationError):
    """A model spec string matches none of the known forms."""


class ModelError(ClosedLoopError):
    """A model call or a model file went wrong."""


class ModelNotAvailableError(ModelError):
    """The model file is not on disk."""


class ModelLoadError(ModelError):
    """The model file exists but cannot be loaded."""


class ModelUnreachableError(ModelError):
    """The model server cannot be reached."""


class ModelAuthError(ModelError):
    """The model server refused the credentials."""


class ModelRateLimitError(ModelError):
    """The model server asked us to slow down."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        self.retry_after = retry_after
        super().__init__(message)


class ModelTimeoutError(ModelError):
    """The model call ran past its timeout."""


class ContextOverflowError(ModelError):
    """The prompt does not fit the model's context window."""


class SchemaCompileError(ModelError):
    """The constrained-decoding grammar compiler rejected the response schema."""


class ModelResponseError(ModelError):
    """The model answered, but the answer cannot be used."""


class TransientModelError(ModelError):
    """A passing fault (injected or real); the same call may succeed if retried."""


class RealModelCallBlockedError(ModelError):
    """A real model was called while real model calls are blocked (unit tests)."""


class ModelPullError(ClosedLoopError):
    """Fetching, assembling or verifying a built-in model failed."""


class ToolError(ClosedLoopError):
    """A tool could not be described, validated or called."""


class SecretUnavailableError(ClosedLoopError):
    """A secret a tool call refers to could not be resolved: no secret of that name is
    declared, or its resolver failed. The message names the secret, never its value; a run
    that meets one ends with halt ``secret_unavailable``."""

    def __init__(self, name: str, reason: str) -> None:
        self.name = name
        self.reason = reason
        super().__init__(f"secret {name!r}: {reason}")


class ActionError(ClosedLoopError):
    """An action contract was violated."""


class PreconditionFailedError(ActionError):
    """A precondition failed; the action was not run."""


class PostconditionFailedError(ActionError):
    """A postcondition failed after the action ran; compensation was triggered."""


class ActionTimeoutError(ActionError):
    """The action ran past its timeout."""


class ConfirmationRequiredError(ActionError):
    """The action needs a human confirmation before it may run."""


class LedgerError(ClosedLoopError):
    """The effect ledger cannot proceed."""


class ReconciliationRequiredError(LedgerError):
    """An effect is recorded as pending: it may or may not have been applied."""


class EffectInFlightError(ReconciliationRequiredError):
    """Another owner holds a live claim on the effect: its call may be in flight right now.

    Not an abandoned claim: asking the world now could find nothing only because the
    call has not landed yet. Wait for the claim to end (its commit is then replayed) or
    for its lease to expire.
    """


class StateError(ClosedLoopError):
    """The state store refused an operation."""


class StaleStateError(StateError):
    """A compare-and-set lost: the stored version is not the one expected."""

    def __init__(self, session_id: str, expected: int, actual: int | None) -> None:
        self.session_id = session_id
        self.expected = expected
        self.actual = actual
        super().__init__(f"session {session_id!r}: expected version {expected}, store has {actual}")


class FencedOutError(StaleStateError):
    """A fenced write lost: the record's fencing token is no longer the writer's.

    A newer claim (a takeover after the writer's lease expired) holds the record, so the
    writer may neither apply its effect nor record an outcome (fencing tokens:
    Kleppmann 2016, "How to do distributed locking").
    """

    def __init__(self, name: str, token: int, actual: int | None) -> None:
        StateError.__init__(
            self, f"record {name!r}: fenced out, token {token} is not the current {actual}"
        )
        self.session_id = name
        self.expected = token
        self.actual = actual


class SessionNotFoundError(StateError):
    """No such session, or it expired."""


class StateSerializationError(StateError):
    """The value cannot be stored as JSON."""


class StoreUnavailableError(StateError):
    """The backing store is down or cannot be written."""


class CircuitOpenError(ClosedLoopError):
    """A circuit breaker is open; the call was not made."""


class AgentError(ClosedLoopError):
    """The agent loop could not go on."""


class InvalidActionError(AgentError):
    """The model proposed an action that failed validation."""


class HandoverRequiredError(AgentError):
    """The task was frozen and handed to a human."""


class OutputValidationError(AgentError):
    """The accepted final answer does not validate against the agent's ``output_type``."""


# Every error shows as closedloop.X, its public home, in tracebacks and docs.
present_under(globals(), __all__, "closedloop")
