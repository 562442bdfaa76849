"""Several server URLs: a client or worker passes over a server that refuses
the connection or never answers, follows ``503 NOT_LEADER`` to the leader it
names, tries the next URL when it names none, and with one URL behaves as
before. The answering servers are real; the others are a closed port, a
socket that takes connections and never answers, and a fake standby."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from conftest import PLAIN, Server, free_port

from orbit import AsyncClient, Client, TaskContext, TransportError, UnknownExecution, Worker


def refused_url() -> str:
    """A URL nothing listens on."""
    return f"http://127.0.0.1:{free_port()}"


class Silent:
    """Takes TCP connections and never answers, like a paused (SIGSTOPped) server."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.05)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.connections: list[socket.socket] = []
        self.closed = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            self.connections.append(conn)

    def close(self) -> None:
        self.closed = True
        self.thread.join()
        for conn in self.connections:
            conn.close()
        self.sock.close()


class Standby:
    """Answers every request ``503 NOT_LEADER`` naming ``leader`` (or none)."""

    def __init__(self, leader: str | None) -> None:
        self.leader = leader
        #: (method, path, Idempotency-Key) of every request.
        self.requests: list[tuple[str, str, str | None]] = []
        standby = self

        class Handler(BaseHTTPRequestHandler):
            def answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                self.rfile.read(length)
                key = self.headers.get("idempotency-key")
                standby.requests.append((self.command, self.path.split("?")[0], key))
                body = json.dumps(
                    {
                        "error": {
                            "code": "NOT_LEADER",
                            "message": "this node is a standby",
                            "leader": standby.leader,
                        }
                    }
                ).encode()
                self.send_response(503)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self.answer()

            def do_POST(self) -> None:
                self.answer()

            def do_DELETE(self) -> None:
                self.answer()

            def log_message(self, *_: Any) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture
def silent() -> Iterator[Silent]:
    s = Silent()
    yield s
    s.close()


@pytest.fixture
def standby() -> Iterator[Callable[[str | None], Standby]]:
    made: list[Standby] = []

    def make(leader: str | None) -> Standby:
        made.append(Standby(leader))
        return made[-1]

    yield make
    for s in made:
        s.close()


class Recording(httpx.HTTPTransport):
    """Real HTTP that notes the base URL and Idempotency-Key of every request."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[tuple[str, str | None]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        base = f"{request.url.scheme}://{request.url.host}:{request.url.port}"
        self.sent.append((base, request.headers.get("idempotency-key")))
        return super().handle_request(request)


def bases(recording: Recording) -> list[str]:
    return [base for base, _ in recording.sent]


# --- the client ------------------------------------------------------------------------


def test_a_refused_first_url_passes_to_the_second(server: Server) -> None:
    down = refused_url()
    rec = Recording()
    with Client([down, server.url], transport=rec) as client:
        client.deploy({"plain.orbit": PLAIN})
        assert bases(rec) == [down, server.url]
        assert client.server == server.url
        # The server that answered is tried first from now on.
        client.list()
        assert bases(rec) == [down, server.url, server.url]


def test_a_server_that_never_answers_is_passed_over(server: Server, silent: Silent) -> None:
    with Client([silent.url, server.url], timeout=0.5) as client:
        began = time.monotonic()
        with pytest.raises(UnknownExecution):
            client.status("missing")
        assert 0.4 < time.monotonic() - began < 5
        assert len(silent.connections) == 1
        assert client.server == server.url
        # The next call starts at the server that answered, at once.
        began = time.monotonic()
        assert client.list().executions == []
        assert time.monotonic() - began < 0.4
        assert len(silent.connections) == 1


def test_not_leader_naming_the_leader_is_followed(
    server: Server, standby: Callable[[str | None], Standby]
) -> None:
    node = standby(server.url + "/")
    with Client(node.url) as client:
        assert client.list().executions == []
        assert len(node.requests) == 1
        assert client.server == server.url
        assert client.servers == [node.url, server.url]
        client.list()
        assert len(node.requests) == 1


def test_not_leader_without_a_leader_goes_to_the_next_url_with_the_same_key(
    server: Server, standby: Callable[[str | None], Standby]
) -> None:
    node = standby(None)
    with Client(server.url) as client:
        client.deploy({"plain.orbit": PLAIN})
    rec = Recording()
    with Client([node.url, server.url], transport=rec) as client:
        started = client.start("Plain", {"n": 2})
        assert started.created
        assert client.server == server.url
    starts = [r for r in node.requests if r[1] == "/v1/executions"]
    assert len(starts) == 1
    key = starts[0][2]
    assert key
    # The start the standby refused went to the next server, with its key.
    assert rec.sent == [(node.url, key), (server.url, key)]


def test_one_url_that_refuses_keeps_the_old_retries() -> None:
    rec = Recording()
    down = refused_url()
    with Client(down, attempts=3, backoff=0.01, transport=rec) as client:
        began = time.monotonic()
        with pytest.raises(TransportError):
            client.status("x")
        assert time.monotonic() - began < 2
    # One request per attempt, no search for another server.
    assert bases(rec) == [down] * 3


def test_one_url_that_never_answers_times_out_as_before(silent: Silent) -> None:
    with Client(silent.url, timeout=0.3, attempts=2, backoff=0.01) as client:
        began = time.monotonic()
        with pytest.raises(TransportError):
            client.status("x")
        assert time.monotonic() - began < 3
    assert len(silent.connections) == 2


def test_the_failover_window_bounds_the_search() -> None:
    rec = Recording()
    one, two = refused_url(), refused_url()
    with Client([one, two], attempts=1, failover_window=0.5, transport=rec) as client:
        began = time.monotonic()
        with pytest.raises(TransportError):
            client.status("x")
        spent = time.monotonic() - began
    assert 0.5 <= spent < 3
    # Rounds over both URLs, with pauses between them, then it gave up.
    assert 4 <= len(rec.sent) < 20
    assert set(bases(rec)) == {one, two}


def test_urls_given_comma_separated(server: Server) -> None:
    down = refused_url()
    with Client(f" {down}/ ,{server.url}, ") as client:
        assert client.servers == [down, server.url]
        assert client.home == down
        assert client.list().executions == []
        assert client.server == server.url
    with pytest.raises(ValueError, match="no server URL"):
        Client([" ", ""])


def test_async_client_passes_over_a_refused_url(server: Server) -> None:
    async def scenario() -> None:
        async with AsyncClient(f"{refused_url()},{server.url}") as client:
            await client.deploy({"plain.orbit": PLAIN})
            started = await client.start("Plain", {"n": 1})
            assert started.created
            assert client.server == server.url

    asyncio.run(scenario())


# --- the worker ------------------------------------------------------------------------


async def finish_one(worker: Worker, server: Server, n: int) -> dict[str, Any]:
    """Starts a Plain execution on ``server`` and waits until the running worker
    finished it; returns its output."""
    async with AsyncClient(server.url) as client:
        started = await client.start("Plain", {"n": n})
        execution = await client.wait(started.execution_id, timeout=20)
        assert execution.status == "completed", execution
        assert isinstance(execution.output, dict)
        return execution.output


def plain_worker(servers: list[str]) -> Worker:
    worker = Worker(servers, worker_id="failover-1", poll_wait=1.0, heartbeat_interval=0.5)

    @worker.task("demo.work")
    async def work(ctx: TaskContext) -> dict[str, int]:
        return {"doubled": ctx.input["n"] * 2}

    return worker


def test_worker_passes_over_a_refused_url_and_a_standby(
    server: Server, standby: Callable[[str | None], Standby]
) -> None:
    node = standby(None)
    with Client(server.url) as client:
        client.deploy({"plain.orbit": PLAIN})
    worker = plain_worker([refused_url(), node.url, server.url])

    async def scenario() -> None:
        running = asyncio.create_task(worker.run())
        try:
            assert await finish_one(worker, server, 4) == {"doubled": 8}
            assert worker.server == server.url
        finally:
            worker.stop()
            await running

    asyncio.run(scenario())
    # Only the registration went to the standby: the worker stayed on the server.
    assert [path for _, path, _ in node.requests] == ["/v1/workers"]


def test_worker_moves_on_and_registers_again_when_its_server_goes_away(
    start_server: Callable[..., Server],
) -> None:
    first = start_server("--session-timeout", "2")
    second = start_server("--session-timeout", "2")
    for s in (first, second):
        with Client(s.url) as client:
            client.deploy({"plain.orbit": PLAIN})
    worker = plain_worker([first.url, second.url])

    async def scenario() -> None:
        running = asyncio.create_task(worker.run())
        try:
            assert await finish_one(worker, first, 1) == {"doubled": 2}
            session = worker._session
            assert worker.server == first.url
            first.stop()
            # The second server does not know the session: the worker registers there.
            assert await finish_one(worker, second, 5) == {"doubled": 10}
            assert worker.server == second.url
            assert worker._session not in (None, session)
        finally:
            worker.stop()
            await running

    asyncio.run(scenario())
