"""The service's JSON answers cross the same secret scrub as every state store write.

What a route answers mostly comes from the store (already scrubbed when written), but not
only: a live run's record, a result built in memory, an error's text. Making the scrub the
app's default response class puts it in front of every answer, whichever route built it.
"""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse

from .._redaction import might_hold_secret, scrub

__all__ = ["ScrubbedJSONResponse"]


class ScrubbedJSONResponse(JSONResponse):
    """A JSON answer with every secret in its text replaced by its reference (a known
    value) or ``"[redacted]"`` (a detected one); keys' names are not judged."""

    def render(self, content: Any) -> bytes:
        body = super().render(content)
        # One probe of the text first: most answers hold no candidate at all.
        if might_hold_secret(body.decode("utf-8")):
            body = super().render(scrub(content))
        return body
