"""``closedloop world serve``: help, bad input as exit 2 with a clear line, and a real run."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from closedloop.cli import main


def _flat(text: str) -> str:
    """The error text without rich's box drawing and line wrapping."""
    for ch in "│╭╮╰╯─":
        text = text.replace(ch, " ")
    return " ".join(text.split())


def test_world_serve_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["world", "serve", "--help"]) == 0
    out = capsys.readouterr().out
    for option in ("--port", "--profile", "--seed", "--faults-file", "--latency-scale"):
        assert option in out


def test_world_without_command_shows_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["world"]) in (0, 2)
    captured = capsys.readouterr()
    assert "serve" in captured.out + captured.err


def test_bad_profile_name_exits_2_naming_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["world", "serve", "--profile", "bogus"]) == 2
    err = _flat(capsys.readouterr().err)
    assert "--profile" in err and "bogus" in err and "none, seed000, harsh" in err
    assert "Traceback" not in err


def test_a_profile_at_an_onset_rate_is_the_one_the_benchmark_reads() -> None:
    from closedloop_bench.cli._world import _profile
    from closedloop_bench.world import load_profile

    chosen = _profile("regimes@0.3", None)
    assert chosen == load_profile("regimes@0.3")
    assert chosen.name == "regimes@0.3" and chosen.regimes is not None
    assert chosen.regimes.onset_rate == 0.3
    assert _profile("seed000@0.1", None).regimes is not None  # regimes added at that rate


@pytest.mark.parametrize(("profile", "needle"), [("regimes@2", "2"), ("regimes@x", "'x'"),
                                                 ("bogus@0.1", "bogus")])  # fmt: skip
def test_a_bad_rate_or_base_exits_2_naming_it(
    profile: str, needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["world", "serve", "--profile", profile]) == 2
    err = _flat(capsys.readouterr().err)
    assert "--profile" in err and needle in err and "Traceback" not in err


def test_bad_faults_file_exits_2_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"endpoints": {"weather": {"error_rate": 2}}}))
    assert main(["world", "serve", "--faults-file", str(bad)]) == 2
    err = _flat(capsys.readouterr().err)
    assert "--faults-file" in err and "endpoints.weather.error_rate" in err


def test_profile_and_faults_file_together_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ok = tmp_path / "ok.toml"
    ok.write_text("[default]\nerror_rate = 0.1\n")
    assert main(["world", "serve", "--profile", "harsh", "--faults-file", str(ok)]) == 2
    assert "not both" in capsys.readouterr().err


def test_negative_latency_scale_is_a_usage_error() -> None:
    assert main(["world", "serve", "--latency-scale", "-1"]) == 2


@pytest.mark.integration
def test_serve_standalone_in_a_subprocess(tmp_path: Path) -> None:
    profile = tmp_path / "mine.toml"
    profile.write_text(
        'name = "mine"\n[endpoints.weather]\nerror_rate = 1.0\nerror_statuses = [502]\n'
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "closedloop",
            "world",
            "serve",
            "--port",
            "0",
            "--faults-file",
            str(profile),
            "--latency-scale",
            "0",
            "--seed",
            "2",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("closedloop world on http://127.0.0.1:"), first
        url = first.split()[-1]
        health = httpx.get(f"{url}/health", timeout=10).json()
        assert health["profile"] == "mine" and health["seed"] == 2
        r = httpx.get(f"{url}/weather", params={"city": "北京"}, timeout=10)
        assert r.status_code == 502
        faults = httpx.get(f"{url}/admin/faults", params={"kind": "error"}).json()["faults"]
        assert [f["request_id"] for f in faults] == [r.headers["x-request-id"]]
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=20)
    assert code == 0
    assert proc.stderr is not None and "Traceback" not in proc.stderr.read()
