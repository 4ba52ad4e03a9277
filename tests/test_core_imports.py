"""``pip install closedloop`` alone is enough for every public module of the core.

A fresh interpreter gets an import blocker in front of ``sys.meta_path`` that refuses every
third-party package that is not a core dependency (the extras, the dev tools and
closedloop-bench), then imports every module of ``closedloop`` and checks that each public
package's ``__all__`` names exist. A module that serves one extra only may refuse to import,
but only with an ImportError that names that extra.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Modules that exist for one extra (with everything under them): importing them without it
# is refused with an ImportError that names the extra.
EXTRA_ONLY = {
    "closedloop.server": "server",
    "closedloop.integrations.langgraph": "langgraph",
}

# Installed here (extras, dev tools, the other distribution) and never needed by the core.
HEAVY = (
    "closedloop_bench",
    "fastapi",
    "starlette",
    "uvicorn",
    "matplotlib",
    "hypothesis",
    "openai",
    "llama_cpp",
    "redis",
    "ray",
    "langgraph",
    "mcp",
    "mcp_types",
    "opentelemetry",
    "tenacity",
    "prometheus_client",
    "selenium",
)

# The probe allows the standard library, closedloop, and the import packages of the core
# dependencies (pyproject's ``dependencies``) and of what they require in turn; it refuses
# every other top-level import.
_PROBE = textwrap.dedent(
    """
    import importlib, importlib.machinery, importlib.metadata as md, json, pathlib, re, sys
    import sysconfig

    core = json.loads(sys.argv[1])
    norm = lambda name: re.sub(r"[-_.]+", "-", name).lower()
    dists, todo = set(), [norm(re.match(r"[A-Za-z0-9._-]+", r).group()) for r in core]
    while todo:
        name = todo.pop()
        if name in dists:
            continue
        dists.add(name)
        try:
            reqs = md.requires(name) or ()
        except md.PackageNotFoundError:
            continue  # a platform's requirement that is not installed here (colorama)
        for req in reqs:
            if "extra ==" not in req and "extra==" not in req:
                todo.append(norm(re.match(r"[A-Za-z0-9._-]+", req).group()))
    allowed = {"closedloop"}
    for module, owners in md.packages_distributions().items():
        if any(norm(owner) in dists for owner in owners):
            allowed.add(module)
    stdlib = tuple(
        str(pathlib.Path(sysconfig.get_paths()[key]).resolve()) for key in ("stdlib", "platstdlib")
    )

    def from_stdlib(name):
        if name in sys.builtin_module_names or name in sys.stdlib_module_names:
            return True
        spec = importlib.machinery.PathFinder.find_spec(name)
        if spec is None:
            return True  # not importable at all: the import fails as it would anyway
        where = spec.origin or next(iter(spec.submodule_search_locations or ()), "")
        where = str(pathlib.Path(where).resolve())
        return where.startswith(stdlib) and "site-packages" not in where

    class Blocker:
        def find_spec(self, name, path=None, target=None):
            top = name.partition(".")[0]
            if top not in allowed and not from_stdlib(top):
                raise ModuleNotFoundError(f"blocked by the test: {name}", name=name)
            allowed.add(top)
            return None

    sys.meta_path.insert(0, Blocker())
    report = {"imported": [], "refused": {}, "missing": {}, "allowed": sorted(allowed)}
    try:
        import closedloop
    except ImportError as exc:
        report["refused"]["closedloop"] = str(exc)
        print(json.dumps(report))
        sys.exit(0)

    # Every module file, found on disk: a package that fails does not hide its modules.
    root = pathlib.Path(closedloop.__file__).parent
    names = []
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names.append(".".join(parts))
    for name in names:
        if name.endswith("__main__"):
            continue  # runs the command line
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            report["refused"][name] = str(exc)
            continue
        report["imported"].append(name)
        if any(part.startswith("_") for part in name.split(".")):
            continue
        absent = []
        for public in getattr(module, "__all__", ()):
            try:
                getattr(module, public)  # a lazy name imports its module here
            except AttributeError:
                absent.append(public)
            except ImportError as exc:
                report["refused"][f"{name}.{public}"] = str(exc)
        if absent:
            report["missing"][name] = absent
    report["allowed"] = sorted(allowed)
    print(json.dumps(report))
    """
)


def _extra_of(module: str) -> str | None:
    """The extra ``module`` serves, if it (or the package it is in) serves one."""
    for name, extra in EXTRA_ONLY.items():
        if module == name or module.startswith(name + "."):
            return extra
    return None


def _core_dependencies() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    dependencies: list[str] = project["dependencies"]
    return dependencies


def _probe(src: Path, core: list[str]) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(core)],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    return _probe(ROOT / "src", _core_dependencies())


def test_the_core_dependencies_are_the_small_set() -> None:
    names = {re.match(r"[A-Za-z0-9._-]+", d).group().lower() for d in _core_dependencies()}  # type: ignore[union-attr]
    assert names == {"pydantic", "httpx", "typer", "rich", "jsonschema", "numpy"}


def test_no_heavy_package_is_allowed_through_the_core(report: dict[str, Any]) -> None:
    assert set(HEAVY) & set(report["allowed"]) == set()


def test_every_core_module_imports_with_the_core_dependencies_only(
    report: dict[str, Any],
) -> None:
    unexpected = {m: why for m, why in report["refused"].items() if _extra_of(m) is None}
    assert unexpected == {}
    # The walk really went through the package, not just its top.
    for name in ("closedloop.agent", "closedloop.control._pid", "closedloop.cli._main"):
        assert name in report["imported"]


def test_a_module_for_an_extra_says_which_extra(report: dict[str, Any]) -> None:
    assert set(EXTRA_ONLY) <= set(report["refused"])
    for name, why in report["refused"].items():
        assert f"closedloop[{_extra_of(name)}]" in why, (name, why)


def test_every_public_name_exists(report: dict[str, Any]) -> None:
    assert report["missing"] == {}


def test_a_core_module_that_imports_an_extra_is_caught(tmp_path: Path) -> None:
    # The same probe on a copy of the core with one module importing matplotlib at its top.
    shutil.copytree(
        ROOT / "src" / "closedloop",
        tmp_path / "closedloop",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    target = tmp_path / "closedloop" / "control" / "_pid.py"
    future = "from __future__ import annotations\n"
    source = target.read_text(encoding="utf-8")
    assert future in source
    target.write_text(source.replace(future, future + "import matplotlib\n", 1))
    report = _probe(tmp_path, _core_dependencies())
    assert "matplotlib" in report["refused"]["closedloop.control._pid"]
    # ...and the first test would fail on it: it is refused, and not for an extra it serves.
    assert _extra_of("closedloop.control._pid") is None


def test_a_missing_extra_is_one_sentence_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from closedloop import ClosedLoopError
    from closedloop._extras import require_extra

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # what an uninstalled module does
    with pytest.raises(ImportError, match=r"pip install 'closedloop\[plots\]'") as caught:
        require_extra("matplotlib", "plots", "plotting a run")
    assert isinstance(caught.value, ClosedLoopError)  # the CLI prints it as one line
    assert "plotting a run needs matplotlib" in str(caught.value)
    assert require_extra("json", "none", "reading") is sys.modules["json"]
