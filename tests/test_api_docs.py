"""The documentation site builds in strict mode, and every public name has a docstring.

``mkdocs build --strict`` fails on a broken link, a page missing from the nav's files or an
unresolved cross-reference; the docstring check (``scripts/docs_check.py``, also the site's
build hook) fails on a name in a public module's ``__all__`` that has nothing to say.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]


def _docs_check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_check", REPO / "scripts" / "docs_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _mkdocs(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join([str(REPO / "src"), str(REPO / "bench" / "src")])
    env = {**os.environ, "PYTHONPATH": path, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_every_public_name_has_a_docstring() -> None:
    missing = _docs_check().missing_docstrings()
    assert missing == [], f"public names without a docstring: {missing}"


def test_the_docstring_check_sees_what_is_missing() -> None:
    check = _docs_check()

    @dataclasses.dataclass
    class Bare:
        x: int

    @dataclasses.dataclass
    class Told:
        """A documented value."""

        x: int

    class Child(Told):
        pass

    assert check._own_docstring(Bare) is None  # the signature dataclasses write is no docstring
    assert check._own_docstring(Told) == "A documented value."
    assert check._own_docstring(Child) is None  # a docstring is not inherited
    assert check.PUBLIC_MODULES[0] == "closedloop" and "closedloop.server" in check.PUBLIC_MODULES


@pytest.mark.timeout(300)
def test_the_site_builds_in_strict_mode(tmp_path: Path) -> None:
    built = _mkdocs(REPO / "mkdocs.yml", tmp_path / "site")
    assert built.returncode == 0, built.stderr[-4000:]
    reference = (tmp_path / "site" / "reference" / "agent.html").read_text(encoding="utf-8")
    assert 'id="closedloop.agent.Agent"' in reference  # the API reference was generated
    assert ":class:<code>" not in reference  # the docstrings' roles show as the names


@pytest.mark.timeout(120)
def test_strict_mode_fails_on_a_broken_link(tmp_path: Path) -> None:
    # The site's own settings (INHERIT), one page that links to a page that does not exist.
    pages = tmp_path / "pages"
    pages.mkdir()
    (pages / "index.md").write_text("# Home\n\nSee [the loop](nowhere.md).\n", encoding="utf-8")
    config = tmp_path / "mkdocs.yml"
    config.write_text(
        f"INHERIT: {REPO / 'mkdocs.yml'}\ndocs_dir: {pages}\nnav:\n  - index.md\n"
        f"hooks:\n  - {REPO / 'scripts' / 'docs_check.py'}\n",
        encoding="utf-8",
    )
    built = _mkdocs(config, tmp_path / "site")
    assert built.returncode != 0
    assert "nowhere.md" in built.stderr


def test_the_build_hook_warns_on_each_missing_docstring(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A warning is what --strict turns into a failed build (mkdocs counts its loggers').
    check = _docs_check()
    monkeypatch.setattr(check, "missing_docstrings", lambda: ["closedloop.models.X"])
    with caplog.at_level("WARNING", logger="mkdocs.plugins.closedloop"):
        check.on_pre_build(config=None)
    assert [r.getMessage() for r in caplog.records] == [
        "public name without a docstring: closedloop.models.X"
    ]
    assert caplog.records[0].name.startswith("mkdocs.")


# A summary row is whole when it ends a sentence: ., ? or !, perhaps inside a closing
# bracket, quote or code span.
_SENTENCE_END = re.compile(r"[.?!][)\]\"'`*]*$")


def _summary_extension() -> ModuleType:
    path = REPO / "scripts" / "griffe_summary.py"
    spec = importlib.util.spec_from_file_location("griffe_summary", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _summary_rows(obj: Any, depth: int = 0) -> list[tuple[str, str]]:
    # What mkdocstrings-python shows in a summary table: each public member's first line.
    rows: list[tuple[str, str]] = []
    for name, member in obj.members.items():
        if name.startswith("_") or not member.is_public:
            continue
        target = member.final_target if member.is_alias else member
        text = "" if target.docstring is None else target.docstring.value.strip()
        if text or target.is_function:  # a method with no docstring is a blank row
            rows.append((f"{obj.path}.{name}", text.split("\n", 1)[0]))
        if target.is_class and depth < 3:
            rows.extend(_summary_rows(target, depth + 1))
    return rows


def _cut_rows(extensions: list[Any]) -> tuple[int, list[tuple[str, str]]]:
    import griffe

    loaded = griffe.load_extensions(*extensions)
    package = griffe.load(
        "closedloop", search_paths=[str(REPO / "src")], extensions=loaded, resolve_aliases=True
    )
    rows: list[tuple[str, str]] = []
    for name in _docs_check().PUBLIC_MODULES:
        inner = name.removeprefix("closedloop").lstrip(".")
        rows.extend(_summary_rows(package[inner] if inner else package))
    return len(rows), [r for r in rows if not _SENTENCE_END.search(r[1].strip())]


def test_first_sentence_is_joined_onto_the_first_line() -> None:
    join = _summary_extension().first_sentence_first
    wrapped = (
        "Each step the model sees the newest\nobservation, e.g. a list. Then more\ntext.\n\nArgs: x"
    )
    assert join(wrapped) == (
        "Each step the model sees the newest observation, e.g. a list.\nThen more text.\n\nArgs: x"
    )
    assert join("One line.\nSecond.") == "One line.\nSecond."
    assert join("- a list\n- stays") == "- a list\n- stays"
    assert join("No end at\nall") == "No end at all"


@pytest.mark.timeout(120)
def test_every_summary_row_is_a_whole_sentence() -> None:
    # The site loads the extension (mkdocs.yml); without it rows would be cut at a line break.
    config = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    assert "scripts/griffe_summary.py:SentenceSummary" in config
    count, cut_without = _cut_rows([])
    assert count > 500 and cut_without != []  # the check sees what a bare load cuts
    _, cut = _cut_rows([_summary_extension().SentenceSummary()])
    assert cut == [], f"summary rows blank or ending mid-sentence: {cut}"
