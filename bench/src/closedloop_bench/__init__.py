"""closedloop-bench: the world, the reference agents and the benchmarks of closedloop.

* :mod:`closedloop_bench.world`: local HTTP services with injected faults.
* :mod:`closedloop_bench.reference`: tools over the world, generated tasks with checkers,
  and the reference agents.
* :mod:`closedloop_bench.benchmarks`: the faults, overhead, advanced-control and
  adversarial benchmarks and their baselines.

Each is imported on its own; this package imports none of them.
"""

from __future__ import annotations

__all__: list[str] = []
