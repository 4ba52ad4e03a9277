"""Shared test configuration. Sections are owned by the area that needs them."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Hypothesis: a thorough profile for benchmarks and local runs, a lean one in CI.
settings.register_profile(
    "ci", max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "dev", max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def closedloop_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An isolated $CLOSEDLOOP_HOME for tests that write state or runs."""
    home = tmp_path / "closedloop-home"
    home.mkdir()
    monkeypatch.setenv("CLOSEDLOOP_HOME", str(home))
    yield home


# --- models: real-model guard (owned by the models area) ---


@pytest.fixture(scope="session")
def llama_threads() -> int:
    """Threads for one in-process llama.cpp model: the cores shared out among the pytest-xdist
    workers. llama.cpp's threads spin-wait on each other, so a model taking every core while
    another worker is busy stalls on each descheduled thread (minutes instead of seconds)."""
    workers = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    return max(1, (os.cpu_count() or 1) // workers)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "real_model: the test may call real models (local GGUF or a real server)"
    )


@pytest.fixture(autouse=True)
def _real_model_guard(request: pytest.FixtureRequest) -> Iterator[None]:
    """Block real model calls in every test unless it is marked ``real_model``."""
    from closedloop.models import allow_real_model_calls

    allowed = request.node.get_closest_marker("real_model") is not None
    with allow_real_model_calls(allowed):
        yield


# --- redis: a real redis-server on a free loopback port (owned by the Redis store area) ---

_REDIS_SERVER = "/usr/bin/redis-server"


def _free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _redis_command(port: int, *args: str, timeout: float = 1.0) -> bytes:
    """Send one RESP command and return the first reply line (no client library needed)."""
    payload = f"*{len(args)}\r\n".encode()
    for arg in args:
        data = arg.encode()
        payload += b"$%d\r\n%s\r\n" % (len(data), data)
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(payload)
        reply = b""
        while not reply.endswith(b"\r\n"):
            chunk = sock.recv(4096)
            if not chunk:
                break
            reply += chunk
    return reply.strip()


class RedisServer:
    """A redis-server subprocess the tests may stop, kill and restart on the same port and data.

    Every write is fsynced to the append-only file before Redis answers, so a SIGKILL loses
    nothing that a client saw committed.
    """

    def __init__(self, directory: Path, port: int) -> None:
        self.directory = directory
        self.port = port
        self.url = f"redis://127.0.0.1:{port}"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def ping(self) -> bool:
        try:
            return _redis_command(self.port, "PING") == b"+PONG"
        except OSError:
            return False

    def start(self, timeout_s: float = 15.0) -> None:
        if self.running:
            return
        log = self.directory / "redis.log"
        # --dir is where the append-only file lives, so a restart reloads every committed write.
        self._proc = subprocess.Popen(
            [
                _REDIS_SERVER,
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--dir", str(self.directory),
                "--daemonize", "no",
                "--save", "",
                "--appendonly", "yes",
                "--appendfsync", "always",
                "--logfile", str(log),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                break
            if self.ping():
                return
            time.sleep(0.02)  # fixture readiness poll, not a test timing
        self.kill()
        text = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
        pytest.fail(f"redis-server did not answer PING on port {self.port}; log tail:\n{text}")

    def stop(self) -> None:
        """Stop gracefully (SIGTERM: Redis flushes and exits)."""
        if self._proc is None:
            return
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None

    def kill(self) -> None:
        """Kill with SIGKILL, as a crash would."""
        if self._proc is None:
            return
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()
        self._proc = None


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A real redis-server on a free 127.0.0.1 port for the whole session (stopped at the end)."""
    if not os.access(_REDIS_SERVER, os.X_OK):
        pytest.fail(
            f"{_REDIS_SERVER} is missing: run `bash scripts/install_system_deps.sh` "
            "(installs the Debian redis-server package) and rerun the tests"
        )
    server = RedisServer(tmp_path_factory.mktemp("redis"), _free_loopback_port())
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """A URL to an empty database on the shared server (restarted if a test killed it)."""
    if not redis_server.running or not redis_server.ping():
        redis_server.kill()
        redis_server.start()
    reply = _redis_command(redis_server.port, "FLUSHALL")
    assert reply == b"+OK", reply
    return f"{redis_server.url}/0"
