"""Every public name of the documented modules has a docstring.

mkdocstrings renders what it finds and stays silent about a name with no docstring, so
`mkdocs build --strict` alone would publish an empty entry. This module is both a mkdocs
hook (``hooks:`` in mkdocs.yml: a missing docstring is logged as a warning, which strict
mode turns into a failed build) and the check ``tests/test_api_docs.py`` runs directly.
As a hook it also shows the Sphinx roles of the docstrings (``:class:`X```) as the name.

A name counts as documented when the object it names carries its own docstring: a class
or a function its ``__doc__`` (not the signature a dataclass writes for itself, not one
inherited from a base), a constant or a type alias the string literal written right
after its assignment (read by griffe, the parser mkdocstrings uses).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import logging
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

PUBLIC_MODULES = (
    "closedloop",
    "closedloop.agent",
    "closedloop.control",
    "closedloop.perception",
    "closedloop.decision",
    "closedloop.execution",
    "closedloop.feedback",
    "closedloop.models",
    "closedloop.policy",
    "closedloop.integrations",
    "closedloop.harness",
    "closedloop.server",
)


def _own_docstring(obj: Any) -> str | None:
    """The docstring an object was written with, or None."""
    if inspect.isclass(obj):
        doc = obj.__dict__.get("__doc__")
        if (
            doc
            and dataclasses.is_dataclass(obj)
            and doc.startswith(obj.__name__ + "(")
            and doc.rstrip().endswith(")")
        ):
            return None  # the signature dataclasses write when a class has no docstring
        return doc if isinstance(doc, str) else None
    doc = getattr(obj, "__doc__", None)
    return doc if isinstance(doc, str) else None


def _defined_here(obj: Any) -> bool:
    """A class or function of closedloop's own, whose ``__doc__`` is its own text."""
    if not (inspect.isclass(obj) or inspect.isfunction(obj) or inspect.ismodule(obj)):
        return False
    module = obj.__name__ if inspect.ismodule(obj) else getattr(obj, "__module__", "")
    return isinstance(module, str) and module.split(".")[0] == "closedloop"


def _griffe_docstring(package: Any, module: str, name: str) -> str | None:
    node = package if module == "closedloop" else package[module.removeprefix("closedloop.")]
    member = node[name]
    target = member.final_target if member.is_alias else member
    return target.docstring.value if target.docstring is not None else None


def missing_docstrings(modules: Iterable[str] = PUBLIC_MODULES) -> list[str]:
    """``module.name`` for every name in a module's ``__all__`` with no docstring."""
    import griffe

    package = griffe.load("closedloop", search_paths=[str(REPO / "src")], resolve_aliases=True)
    missing: list[str] = []
    for module_name in modules:
        module = importlib.import_module(module_name)
        if not (module.__doc__ or "").strip():
            missing.append(f"{module_name} (the module itself)")
        for name in getattr(module, "__all__", ()):
            obj = getattr(module, name)
            if _defined_here(obj):
                doc = _own_docstring(obj)
            else:  # a constant, an alias or a typing construct: the attribute's docstring
                doc = _griffe_docstring(package, module_name, name)
            if not (doc or "").strip():
                missing.append(f"{module_name}.{name}")
    return missing


# The docstrings name other objects with Sphinx roles (":class:`Agent`"); Markdown renders
# the backticks as code and leaves the role in front. The page shows the name alone.
_ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc|obj|const):(<code>)~?")


def on_page_content(html: str, **kwargs: Any) -> str:
    """The mkdocs hook: drop the Sphinx role in front of a name the docstrings cite."""
    return _ROLE.sub(r"\1", html)


def on_pre_build(config: Any) -> None:
    """The mkdocs hook: warn (and so fail a strict build) on every undocumented name."""
    log = logging.getLogger("mkdocs.plugins.closedloop")
    source = str(REPO / "src")
    if source not in sys.path:  # this checkout's sources, not another installed copy
        sys.path.insert(0, source)
    for name in missing_docstrings():
        log.warning("public name without a docstring: %s", name)
