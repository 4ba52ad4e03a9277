"""Reading an HTTP Retry-After header (RFC 9110, section 10.2.3)."""

from __future__ import annotations

import math
from datetime import UTC
from email.utils import parsedate_to_datetime

__all__ = ["parse_retry_after"]


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait, from ``delay-seconds`` or an HTTP date; None if absent or unreadable.

    ``now`` is the caller's clock in epoch seconds (for the date form). A date in the
    past gives 0.0. Decimal and negative delays are tolerated leniently: decimals are
    kept, negative or non-finite values give None.
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return seconds if math.isfinite(seconds) and seconds >= 0.0 else None
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when is None:  # older Pythons returned None instead of raising
        return None  # type: ignore[unreachable]
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    try:
        return max(0.0, when.timestamp() - now)
    except (OverflowError, ValueError, OSError):
        return None
