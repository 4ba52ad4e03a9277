"""Fixtures for the integration modes: a manual clock and sleep recorders (nothing sleeps),
and real MCP servers for the MCP tools."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self, start: float = 100.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class SleepRecorder:
    """Records the delays it was asked to wait; usable as a sync or an async sleep."""

    def __init__(self, clock: FakeClock | None = None) -> None:
        self.delays: list[float] = []
        self.clock = clock

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        if self.clock is not None:
            self.clock.advance(seconds)

    async def asleep(self, seconds: float) -> None:
        self(seconds)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def sleeper(clock: FakeClock) -> SleepRecorder:
    return SleepRecorder(clock)


# --- MCP: real servers the tests start (stdio subprocesses, one streamable HTTP server) ---

MCP_SERVERS = Path(__file__).parent / "mcp_servers"
SHOP_SERVER = MCP_SERVERS / "shop_server.py"
BROKEN_SERVER = MCP_SERVERS / "broken_server.py"


def process_alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie, exited but not yet reaped, counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


class PidFile:
    """Where each test server started writes its pid, to check that every one has ended."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def pids(self) -> list[int]:
        if not self.path.exists():
            return []
        return [int(line) for line in self.path.read_text().split()]

    def alive(self) -> list[int]:
        return [pid for pid in self.pids() if process_alive(pid)]


@pytest.fixture
def pidfile(tmp_path: Path) -> PidFile:
    return PidFile(tmp_path / "pids")


class HttpServer:
    """The shop server as a streamable HTTP subprocess on a loopback socket bound for it."""

    def __init__(self, log: Path) -> None:
        self.log = log
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
        # The socket is listening before the server starts: nobody else can take the port,
        # and a request made meanwhile waits in the backlog until the server accepts it.
        with log.open("w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(SHOP_SERVER), "--http-fd", str(sock.fileno())],
                pass_fds=[sock.fileno()],
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        sock.close()

    def wait_until_it_answers(self, timeout_s: float = 90.0) -> None:
        try:
            urllib.request.urlopen(self.url, timeout=timeout_s)  # loopback only
        except urllib.error.HTTPError:
            return  # any HTTP status is an answer (a bare GET is refused without a session)
        except OSError as exc:
            self.stop()
            pytest.fail(f"the MCP HTTP server did not answer ({exc}):\n{self.log.read_text()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)


@pytest.fixture(scope="module")
def http_shop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServer]:
    server = HttpServer(tmp_path_factory.mktemp("mcp-http") / "server.log")
    server.wait_until_it_answers()
    yield server
    server.stop()
