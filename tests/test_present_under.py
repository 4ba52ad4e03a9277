"""``present_under``: the public home a re-exported name shows in reprs, pickles and docs."""

from __future__ import annotations

import pickle
from typing import Any

import closedloop
import closedloop.policy as policy
from closedloop._public import present_under


def test_classes_and_functions_take_the_module_and_other_objects_are_left() -> None:
    class Thing:
        pass

    def helper() -> None:
        pass

    limit = 3
    namespace: dict[str, Any] = {"Thing": Thing, "helper": helper, "LIMIT": limit}
    present_under(namespace, ["Thing", "helper", "LIMIT"], "pkg.public")
    assert Thing.__module__ == "pkg.public"
    assert helper.__module__ == "pkg.public"
    assert namespace["LIMIT"] == 3


def test_only_the_names_given_move() -> None:
    class Kept:
        pass

    before = Kept.__module__
    present_under({"Kept": Kept}, [], "pkg.public")
    assert Kept.__module__ == before


def test_a_public_name_pickles_through_its_public_home() -> None:
    # pickle finds a class by its __module__: the public path must import and hold it.
    assert closedloop.ConfigurationError.__module__ == "closedloop"
    assert policy.stop_after_attempt.__module__ == "closedloop.policy"
    assert pickle.loads(pickle.dumps(policy.stop_after_attempt(3))) == policy.stop_after_attempt(3)
