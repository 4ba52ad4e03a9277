"""Readable by outsiders: the sources cite concepts and published work, and their links resolve.

A reader of the installed package has neither the project's issue tracker nor the notes
it was built from, so docstrings, comments and messages may not lean on them: no
article numbers ("seed 000"), no section signs, no "issue 11". A document a module points
to (``docs/architecture.md``) must exist in the repository.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SOURCE_ROOTS = [p for p in (REPO / "src", REPO / "bench" / "src") if p.is_dir()]

FORBIDDEN = {
    "an article number": re.compile(r"\bseed(?: 0|-0\d)", re.IGNORECASE),
    "a section sign": re.compile("§"),
    "an issue number": re.compile(r"\bissues?\s*#?\d+", re.IGNORECASE),
}
DOC_REFERENCE = re.compile(r"(?<![\w/.-])((?:[\w-]+/)*[\w-]+\.(?:md|rst))\b")


def _source_files() -> list[Path]:
    files: list[Path] = []
    for root in SOURCE_ROOTS:
        for path in sorted(root.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                files.append(path)
    return files


def _text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:  # images, fonts: nothing a reader reads as prose
        return None


def _offences(text: str) -> list[str]:
    found: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        for what, pattern in FORBIDDEN.items():
            match = pattern.search(line)
            if match:
                found.append(f"line {number}: {what} ({match.group(0)!r})")
    return found


def _missing_docs(text: str) -> list[str]:
    roots = (REPO, REPO / "bench")  # the core's documents, and the bench distribution's
    found = DOC_REFERENCE.findall(text)
    return sorted({ref for ref in found if not any((r / ref).is_file() for r in roots)})


def test_the_patterns_catch_what_they_should() -> None:
    # The checks below pass vacuously if the patterns match nothing; pin them.
    assert _offences("The estimator of seed 000, section 4.2.") != []
    assert _offences("see §4.2") != []
    assert _offences("(helper: advanced control, Issue 11)") != []
    assert _offences("Gao 2003; Han 2009; RFC 9110, section 10.2.3; tissue 3") == []
    assert _offences("the seed-003 rule") != []
    assert _offences('a random seed: seed=4, fresh fault seeds, profile "seed000"') == []
    assert _missing_docs("see ARCHITECTURE.md and docs/architecture.md") == ["ARCHITECTURE.md"]
    assert _missing_docs("see README.md") == []


def test_the_sources_are_found() -> None:
    files = _source_files()
    assert any(p.name == "__init__.py" for p in files)
    assert len(files) > 100


@pytest.mark.parametrize("path", _source_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_article_section_or_issue_numbers(path: Path) -> None:
    text = _text(path)
    if text is None:
        return
    assert _offences(text) == [], f"{path.relative_to(REPO)} cites what a reader lacks"


@pytest.mark.parametrize("path", _source_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_document_a_module_points_to_exists(path: Path) -> None:
    text = _text(path)
    if text is None:
        return
    assert _missing_docs(text) == [], f"{path.relative_to(REPO)} points to missing documents"


def test_the_architecture_document_names_the_real_modules() -> None:
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    # Every ``closedloop.x._y`` or ``pkg/_y.py`` the document names must exist in src.
    named = set(
        re.findall(
            r"\b((?:control|perception|decision|execution|feedback|agent|"
            r"models|integrations|harness|server|cli)/_?\w+\.py)\b",
            text,
        )
    )
    assert named, "the document names no module"
    missing = sorted(n for n in named if not (REPO / "src" / "closedloop" / n).is_file())
    assert missing == []


def _pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


@pytest.mark.parametrize("page", _pages(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_the_readme_cites_no_sections_or_issues(page: Path) -> None:
    # The README and the site may say which article a benchmark's claim comes from, but
    # not by section, and never by the tracker's issue numbers.
    text = page.read_text(encoding="utf-8")
    found = [
        line
        for line in text.splitlines()
        if FORBIDDEN["a section sign"].search(line) or FORBIDDEN["an issue number"].search(line)
    ]
    assert found == []
    if page.name == "README.md":
        assert _missing_docs(text) == []
    else:  # a page names its documents relative to itself (mkdocs --strict checks links)
        refs = DOC_REFERENCE.findall(text)
        missing = [r for r in refs if not (page.parent / r).is_file() and not (REPO / r).is_file()]
        assert missing == []


def test_the_getting_started_page_states_the_default_home(monkeypatch: pytest.MonkeyPatch) -> None:
    # The page a newcomer reads first says where the runs, models and state go by default,
    # and what it says is what the code does.
    from closedloop._home import closedloop_home

    monkeypatch.delenv("CLOSEDLOOP_HOME", raising=False)
    stated = re.search(
        r"`CLOSEDLOOP_HOME` defaults to `~/([^`]+)`",
        (REPO / "docs" / "getting-started.md").read_text(encoding="utf-8"),
    )
    assert stated is not None, "docs/getting-started.md does not state CLOSEDLOOP_HOME's default"
    assert closedloop_home() == Path.home() / stated.group(1)


def test_the_mcp_page_names_every_effect_value_and_the_sdks_server_class() -> None:
    # A newcomer copies effect values from the examples and the server class from the page:
    # each must be named there, and the import the page shows must work with the SDK here.
    import importlib

    from closedloop.execution import EffectClass

    page = (REPO / "docs" / "how-to" / "mcp.md").read_text(encoding="utf-8")
    missing = [e.value for e in EffectClass if f'`"{e.value}"`' not in page]
    assert missing == [], f"docs/how-to/mcp.md does not name the effect values {missing}"
    used = set()
    for example in (REPO / "examples").glob("*.py"):
        for declared in re.findall(r"effects=\{([^}]*)\}", example.read_text(encoding="utf-8")):
            used |= set(re.findall(r":\s*\"(\w+)\"", declared))
    assert "once" in used and used <= {e.value for e in EffectClass}
    assert "from mcp.server.mcpserver import MCPServer" in page and "FastMCP" in page
    assert importlib.import_module("mcp.server.mcpserver").MCPServer.__name__ == "MCPServer"
