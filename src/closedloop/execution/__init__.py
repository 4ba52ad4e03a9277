"""Execution: the only place where the outside world is changed.

Every change goes through an :class:`AtomicAction` (preconditions, postconditions, timeout,
retry policy, compensation, effect class) and, for effects that must not repeat, through
the :class:`EffectLedger` kept in the state store. :class:`Executor` ties them together and
returns a typed :class:`ActionOutcome`. A credential an action needs is a :class:`Secret`:
a reference everywhere, resolved into the arguments only as the action runs.
"""

from __future__ import annotations

from types import FunctionType

from .._policy import (
    AllOf,
    AnyOf,
    Policy,
    RetryPolicy,
    retry_if_exception,
    retry_if_exception_type,
    retry_never,
    stop_after_attempt,
    stop_after_backoff,
)
from .._policy_state import PROGRAMMING_ERRORS, PolicyState
from .._records import RecordStore
from .._wait import Wait, WaitSum, wait_exponential, wait_fixed, wait_jitter, wait_none, wait_random
from ._action import (
    AtomicAction,
    CheckFn,
    Compensation,
    Condition,
    Confirmation,
    Reconciler,
    Reconciliation,
)
from ._admission import AdmissionGate, Permit, Throttled
from ._canonical import DEFAULT_VOLATILE_FIELDS, canonical_json, effect_key, normalise
from ._effect import EffectClass, EffectRecord, EffectStatus
from ._execute import execute, execute_sync
from ._executor import Executor
from ._ledger import EffectLedger
from ._outcome import ActionOutcome, ExecutionEvent, OutcomeStatus
from ._saga import CompensationResult
from ._secret import EnvResolver, Secret, SecretResolver

# The executor's retry policy is the one policy algebra of closedloop.policy. The names
# below are the ones this package exported before the algebra was shared, kept as
# deprecated aliases for one release (docs/migration.md maps each to its new name).
RetryState = PolicyState
Stop = Policy
RetryIf = Policy
StopAny = AnyOf
StopAll = AllOf
RetryIfAny = AnyOf
RetryIfAll = AllOf
StopAfterAttempt = stop_after_attempt
StopAfterDelay = stop_after_backoff
RetryIfException = retry_if_exception_type
RetryIfPredicate = retry_if_exception
RetryNever = retry_never
WaitNone = wait_none
WaitFixed = wait_fixed
WaitExponential = wait_exponential
WaitRandom = wait_random
WaitFullJitter = wait_jitter

__all__ = [
    "DEFAULT_VOLATILE_FIELDS",
    "PROGRAMMING_ERRORS",
    "ActionOutcome",
    "AdmissionGate",
    "AtomicAction",
    "CheckFn",
    "Compensation",
    "CompensationResult",
    "Condition",
    "Confirmation",
    "EffectClass",
    "EffectLedger",
    "EffectRecord",
    "EffectStatus",
    "EnvResolver",
    "ExecutionEvent",
    "Executor",
    "OutcomeStatus",
    "Permit",
    "Reconciler",
    "Reconciliation",
    "RecordStore",
    "RetryIf",
    "RetryIfAll",
    "RetryIfAny",
    "RetryIfException",
    "RetryIfPredicate",
    "RetryNever",
    "RetryPolicy",
    "RetryState",
    "Secret",
    "SecretResolver",
    "Stop",
    "StopAfterAttempt",
    "StopAfterDelay",
    "StopAll",
    "StopAny",
    "Throttled",
    "Wait",
    "WaitExponential",
    "WaitFixed",
    "WaitFullJitter",
    "WaitNone",
    "WaitRandom",
    "WaitSum",
    "canonical_json",
    "effect_key",
    "execute",
    "execute_sync",
    "normalise",
]

# Public names show as closedloop.execution.X in reprs and docs (httpx does the same); the
# records protocol is defined beside the whole package (both execution and feedback use it)
# and published here.
for _name in __all__:
    _obj = globals()[_name]
    if isinstance(_obj, type | FunctionType) and _obj.__module__.startswith(
        (f"{__name__}._", "closedloop._records")
    ):
        _obj.__module__ = __name__
