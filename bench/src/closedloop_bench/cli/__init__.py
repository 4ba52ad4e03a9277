"""The command groups closedloop-bench adds to ``closedloop``.

They are listed in the ``closedloop.cli`` entry-point group of this distribution, so the
core command line finds them without importing this package.
"""

from __future__ import annotations

from . import _adversarial  # noqa: F401  (registers ``bench adversarial``)
from . import _faults as _faults  # registers ``bench faults`` and ``bench budget``
from . import _fleet as _fleet  # registers ``bench fleet``
from ._bench import app as bench_app
from ._demo import app as demo_app
from ._world import app as world_app

__all__ = ["bench_app", "demo_app", "world_app"]
