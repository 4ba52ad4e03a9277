"""Every table quoted from a results file says so, and its numbers are in that file.

A table in README.md or docs/**/*.md that follows the comment
``<!-- results: bench/results/FILE.json -->`` quotes that file: every number in its
numeric cells must be one of the file's numbers, as shown (rounded to the digits the
table prints, or as a percentage of a fraction). Label cells (the ones with words) are
not checked. A number that drifts from its file, or a table whose file is gone, fails.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MARK = re.compile(r"^<!-- results: (\S+) -->$")
NUMBER = re.compile(r"(?<![\w.])-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|(?<![\w.])-?\d+(?:\.\d+)?")
# What a numeric cell may hold besides its numbers: units, ranges, brackets, emphasis.
NUMERIC_REST = re.compile(r"^[\s%–\-/×\[\](),.*]*$")
TARGET = ("≤", "≥", "<", ">", "—")


def doc_files() -> list[Path]:
    """README.md and every page of the documentation site."""
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def quoted_tables(text: str) -> Iterator[tuple[str, int, list[list[str]]]]:
    """(results file, line number, rows of cells) for each marked table."""
    lines = text.splitlines()
    for number, line in enumerate(lines):
        found = MARK.match(line.strip())
        if not found:
            continue
        rows: list[list[str]] = []
        for row in lines[number + 1 :]:
            if not row.startswith("|"):
                break
            cells = [c.strip() for c in row.strip().strip("|").split("|")]
            if not all(set(c) <= set("-: ") for c in cells):  # the header's rule
                rows.append(cells)
        yield found.group(1), number + 1, rows[1:]  # the header names columns


def numbers_in(value: object) -> list[float]:
    """Every number anywhere in a JSON value."""
    if isinstance(value, bool):
        return []
    if isinstance(value, int | float):
        return [float(value)] if math.isfinite(value) else []
    if isinstance(value, dict):
        return [n for v in value.values() for n in numbers_in(v)]
    if isinstance(value, list):
        return [n for v in value for n in numbers_in(v)]
    return []


def shown(token: str) -> tuple[float, int]:
    """The number a table prints and how many decimals it shows."""
    plain = token.replace(",", "")
    decimals = len(plain.split(".")[1]) if "." in plain else 0
    return float(plain), decimals


def found_in(token: str, numbers: list[float]) -> bool:
    value, decimals = shown(token)
    slack = 0.5 * 10.0**-decimals + 1e-9
    for n in numbers:
        for candidate in (n, n * 100.0):  # a share may be printed as a percentage
            if abs(candidate - value) <= slack:
                return True
    return False


def numeric_cells(row: list[str]) -> Iterator[str]:
    for cell in row:
        rest = NUMBER.sub("", cell)
        if cell and not cell.startswith(TARGET) and NUMERIC_REST.match(rest):
            yield cell


def missing_numbers(rows: list[list[str]], numbers: list[float]) -> list[str]:
    return [
        f"{row[0]!r}: {token}"
        for row in rows
        for cell in numeric_cells(row)
        for token in NUMBER.findall(cell)
        if not found_in(token, numbers)
    ]


def _cases() -> list[tuple[Path, str, int, list[list[str]]]]:
    return [
        (path, results, line, rows)
        for path in doc_files()
        for results, line, rows in quoted_tables(path.read_text(encoding="utf-8"))
    ]


def test_the_check_catches_a_drifted_number() -> None:
    numbers = numbers_in({"success": 0.4, "calls": 3.2, "tokens": 3239.0, "ok": [2, 5]})
    good = [["closed", "2/5", "40 %", "3.2", "3,239"]]
    assert missing_numbers(good, numbers) == []
    assert missing_numbers([["closed", "2/5", "45 %", "3.2", "3,239"]], numbers) == ["'closed': 45"]
    assert missing_numbers([["closed", "3.3"]], numbers) == ["'closed': 3.3"]
    # Labels and targets are not quoted numbers.
    assert missing_numbers([["PID kp=2.5", "≤ 2", "frozen (u = 0.5)"]], numbers) == []


def test_the_headline_tables_are_marked() -> None:
    cases = _cases()
    marked = {(p.relative_to(REPO).as_posix(), r) for p, r, _, _ in cases}
    assert ("README.md", "bench/results/demo.json") in marked
    assert ("docs/benchmarks/index.md", "bench/results/demo.json") in marked
    assert len(cases) >= 9 and all(rows for _, _, _, rows in cases)


@pytest.mark.parametrize(
    ("path", "results", "line", "rows"),
    _cases(),
    ids=lambda v: v.relative_to(REPO).as_posix() if isinstance(v, Path) else str(v)[:40],
)
def test_every_quoted_number_is_in_its_results_file(
    path: Path, results: str, line: int, rows: list[list[str]]
) -> None:
    source = REPO / results
    assert source.is_file(), f"{path.name}:{line} quotes {results}, which does not exist"
    numbers = numbers_in(json.loads(source.read_text(encoding="utf-8")))
    missing = missing_numbers(rows, numbers)
    assert missing == [], f"{path.name}:{line}: not in {results}: {missing}"
