"""Test support: a real ``orbit server`` on a free port and a temporary SQLite
file. The binary is ``$ORBIT_BIN``, else ``$CARGO_TARGET_DIR/debug/orbit``,
else the workspace's ``target/debug/orbit`` (``.ci/python.sh`` builds it)."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[3]

PLAIN = """
task "demo.work" version "1.0.0" {
    input  { n: Int }
    output { doubled: Int }
}

workflow Plain version "1.0.0" {
    input { n: Int }

    step work {
        worker "demo.work"
        with { n: input.n }
    }

    output { doubled: work.doubled }
}
"""

SAGA = """
task "trip.book" version "1.0.0" {
    input  { trip: String }
    output { booking: String }
}

task "trip.unbook" version "1.0.0" {
    input  { booking: String }
    output { }
}

task "trip.pay" version "1.0.0" {
    input  { trip: String }
    output { paid: Bool }
}

workflow Trip version "1.0.0" {
    input { trip: String }

    step book {
        worker "trip.book"
        with { trip: input.trip }
        compensate {
            worker "trip.unbook"
            with { booking: book.booking }
        }
    }

    step pay {
        worker "trip.pay"
        with { trip: input.trip }
        after: [book]
    }

    output { booking: book.booking }
}
"""


def orbit_bin() -> Path:
    if os.environ.get("ORBIT_BIN"):
        return Path(os.environ["ORBIT_BIN"])
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    return target / "debug" / "orbit"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """A running ``orbit server``."""

    def __init__(self, tmp: Path, *extra: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = (tmp / f"server-{self.port}.log").open("wb")
        args = [
            str(orbit_bin()),
            "server",
            "--db",
            f"sqlite://{tmp}/orbit-{self.port}.db",
            "--listen",
            f"127.0.0.1:{self.port}",
            *extra,
        ]
        self.process = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"orbit server did not start (see {self.log.name})")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    servers: list[Server] = []

    def start(*extra: str) -> Server:
        server = Server(tmp_path, *extra)
        servers.append(server)
        return server

    yield start
    for s in servers:
        s.stop()


@pytest.fixture
def server(start_server: Callable[..., Server]) -> Server:
    """A server whose silent workers are noticed after 2 s."""
    return start_server("--session-timeout", "2")
