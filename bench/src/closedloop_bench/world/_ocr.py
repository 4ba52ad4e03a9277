"""OCR-like noise for the report documents: one misread digit spoils a report.

Only look-alike substitutions and stray spaces: every corrupted number can still be
read back exactly by a careful parser, so the clean figures stay the one right answer.
"""

from __future__ import annotations

import random
import re
from typing import Literal

__all__ = ["LOOKALIKES", "add_ocr_noise"]

# Digit -> the letter an OCR engine confuses it with.
LOOKALIKES: dict[str, str] = {"0": "O", "1": "l", "5": "S", "8": "B", "2": "Z"}

_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")
_RATES: dict[str, tuple[float, float]] = {
    # (per-digit substitution probability, per-number stray-space probability)
    "clean": (0.0, 0.0),
    "light": (0.08, 0.2),
    "heavy": (0.3, 0.5),
}


def add_ocr_noise(
    text: str, noise: Literal["clean", "light", "heavy"], rng: random.Random
) -> tuple[str, int]:
    """Return the noisy text and how many corruptions were made (0 for ``clean``)."""
    p_sub, p_space = _RATES[noise]
    count = 0

    def corrupt(match: re.Match[str]) -> str:
        nonlocal count
        chars = list(match.group(0))
        for i, ch in enumerate(chars):
            if ch in LOOKALIKES and rng.random() < p_sub:
                chars[i] = LOOKALIKES[ch]
                count += 1
        if len(chars) > 1 and rng.random() < p_space:
            cut = rng.randint(1, len(chars) - 1)
            chars.insert(cut, " ")
            count += 1
        return "".join(chars)

    return _NUMBER.sub(corrupt, text), count
