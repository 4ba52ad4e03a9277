"""One meaning per public name, across closedloop and closedloop-bench.

A name in the ``__all__`` of two public packages or modules must be the same object in both (a
re-export); two different things under one name make ``from x import Task`` a guess.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections import defaultdict
from types import ModuleType

import closedloop
import closedloop_bench


def _public_packages() -> list[ModuleType]:
    """Every public package and public module (``closedloop.policy`` is a module)."""
    packages: list[ModuleType] = []
    for root in (closedloop, closedloop_bench):
        packages.append(root)
        for info in pkgutil.walk_packages(root.__path__, f"{root.__name__}."):
            private = any(part.startswith("_") for part in info.name.split(".")[1:])
            if not private:
                packages.append(importlib.import_module(info.name))
    return packages


def _meanings() -> dict[str, dict[int, list[str]]]:
    """Public name → id of the object → the packages exporting that object under it."""
    found: dict[str, dict[int, list[str]]] = defaultdict(lambda: defaultdict(list))
    for package in _public_packages():
        for name in getattr(package, "__all__", ()):
            found[name][id(getattr(package, name))].append(package.__name__)
    return found


def test_the_walk_sees_both_distributions() -> None:
    names = {p.__name__ for p in _public_packages()}
    assert {"closedloop.agent", "closedloop.harness", "closedloop_bench.reference"} <= names
    assert {"closedloop_bench.world", "closedloop_bench.benchmarks"} <= names
    assert {"closedloop.policy", "closedloop_bench.reference.weather"} <= names


# Clashes another change is removing; each entry names the name. Keep this empty.
KNOWN_CLASHES: frozenset[str] = frozenset()


def test_no_public_name_means_two_things() -> None:
    clashes = {
        name: sorted(sorted(where) for where in objects.values())
        for name, objects in _meanings().items()
        if len(objects) > 1 and name not in KNOWN_CLASHES
    }
    assert clashes == {}


def test_every_known_clash_is_still_one() -> None:
    # An entry whose clash is gone must leave the list, so the list cannot hide a new one.
    meanings = _meanings()
    assert sorted(n for n in KNOWN_CLASHES if len(meanings.get(n, {})) < 2) == []


def test_a_re_export_is_one_meaning() -> None:
    # The same object under one name in two packages is fine: the 429 event is one class.
    (where,) = _meanings()["RateLimited"].values()
    assert sorted(where) == ["closedloop.feedback", "closedloop.perception"]
