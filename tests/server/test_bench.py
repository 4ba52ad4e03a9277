"""The load and soak benchmarks in their small CI form: real subprocesses on loopback."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"

pytestmark = pytest.mark.integration


def _run(script: str, out: Path, *extra: str) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), "--small", "--out", str(out), *extra],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report: dict[str, object] = json.loads(out.read_text())
    return report


def test_small_load_answers_every_session_its_own_task(tmp_path: Path) -> None:
    report = _run("service_load.py", tmp_path / "load.json", "--alone", "3")
    assert report["sessions"] == 50 and report["keys"] == 5
    assert report["ok"] == 50 and report["wrong"] == 0 and report["leaks"] == 0
    assert report["steps"] == 100
    overhead = report["control_overhead_ms_per_step"]
    assert isinstance(overhead, dict) and 0 < overhead["p50"] <= overhead["p99"]
    alone = report["control_overhead_ms_per_step_alone"]
    assert isinstance(alone, dict) and alone["p50"] > 0


def test_small_soak_samples_memory_and_checks_every_answer(tmp_path: Path) -> None:
    report = _run("service_soak.py", tmp_path / "soak.json")
    assert report["problems"] == 0 and report["iterations"]
    samples = report["samples"]
    assert isinstance(samples, list) and len(samples) >= 20
    assert all(rss > 10 for _, rss in samples)
    rss = report["rss_mb"]
    assert isinstance(rss, dict) and abs(rss["growth"]) <= 0.10
    assert report["flat_within_10_percent"] is True


def test_the_sweep_offers_poisson_arrivals_at_the_asked_rate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(BENCH))  # the sweep imports its sibling script
    import service_rates

    times = service_rates.arrivals(50.0, 20.0, stream=7)
    assert times == service_rates.arrivals(50.0, 20.0, stream=7)  # reproducible
    assert times != service_rates.arrivals(50.0, 20.0, stream=8)
    assert all(0.0 <= a < b < 20.0 for a, b in itertools.pairwise(times))
    # 1,000 expected; a Poisson count is within 5 standard deviations (~160) of it
    assert abs(len(times) - 1000) < 160
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert abs(sum(gaps) / len(gaps) - 1 / 50.0) < 0.004  # exponential gaps, mean 1/rate
