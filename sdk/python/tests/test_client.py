"""The clients against a real server: idempotent retries of a start whose
answer was lost, error classes, listing, signals."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from conftest import PLAIN, Server

from orbit import (
    AsyncClient,
    Client,
    CompileError,
    ExecutionExists,
    InvalidRequest,
    TransportError,
    UnknownExecution,
    UnknownWorkflow,
)

GATE = """
workflow Gate version "1.0.0" {
    input { n: Int }
    step approval { signal "approve" }
    output { payload: approval }
}
"""


class DropFirstAnswer(httpx.BaseTransport):
    """Sends every request, but loses the answer to the first matching one, as a
    connection dropped after the server acted would."""

    def __init__(self, method: str, path: str) -> None:
        self.inner = httpx.HTTPTransport()
        self.method, self.path = method, path
        self.dropped = 0
        self.keys: list[str | None] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        if request.method == self.method and request.url.path == self.path:
            self.keys.append(request.headers.get("idempotency-key"))
            if self.dropped == 0:
                self.dropped += 1
                response.read()
                response.close()
                raise httpx.ReadError("connection dropped after the server answered")
        return response


def test_start_retried_after_a_dropped_answer_starts_once(server: Server) -> None:
    drop = DropFirstAnswer("POST", "/v1/executions")
    with Client(server.url, transport=drop, backoff=0.01) as client:
        client.deploy({"plain.orbit": PLAIN})
        started = client.start("Plain", {"n": 3})
        # Two sends with one generated key; the second got the stored answer.
        assert drop.dropped == 1
        assert len(drop.keys) == 2
        assert drop.keys[0]
        assert drop.keys[0] == drop.keys[1]
        assert started.created is True
        assert started.replayed is True
        page = client.list(workflow="Plain")
        assert [e["execution_id"] for e in page.executions] == [started.execution_id]

        # With a caller-chosen key and execution id, a later retry is safe too.
        again = client.start("Plain", {"n": 3}, execution_id="fixed-1", idempotency_key="k-1")
        same = client.start("Plain", {"n": 3}, execution_id="fixed-1", idempotency_key="k-1")
        assert again.execution_id == same.execution_id == "fixed-1"
        assert same.replayed


def test_errors_map_to_exception_classes(server: Server) -> None:
    with Client(server.url) as client:
        with pytest.raises(UnknownWorkflow) as e:
            client.start("Nope", {})
        assert e.value.status == 404
        with pytest.raises(UnknownExecution):
            client.status("missing")
        with pytest.raises(CompileError) as c:
            client.deploy({"bad.orbit": "workflow {"})
        assert c.value.diagnostics
        client.deploy({"plain.orbit": PLAIN})
        with pytest.raises(InvalidRequest) as i:
            client.start("Plain", {"n": "not a number"})
        assert i.value.code == "INPUT_CONTRACT_VIOLATION"
        client.start("Plain", {"n": 1}, execution_id="x-1")
        assert client.start("Plain", {"n": 1}, execution_id="x-1").created is False
        client.deploy({"gate.orbit": GATE})
        with pytest.raises(ExecutionExists):
            client.start("Gate", {"n": 1}, execution_id="x-1")


def test_connection_errors_are_retried_then_raised() -> None:
    with (
        Client("http://127.0.0.1:9", attempts=2, backoff=0.01) as client,
        pytest.raises(TransportError),
    ):
        client.status("x")


def test_a_followed_leader_that_is_gone_sends_the_client_back_home(server: Server) -> None:
    # As if a NOT_LEADER answer had named a leader that died since.
    with Client(server.url, attempts=2, backoff=0.01) as client:
        client.server = "http://127.0.0.1:9"
        with pytest.raises(UnknownExecution):
            client.status("never-started")
        assert client.server == server.url.rstrip("/")


def test_async_client_signals_and_lists(server: Server) -> None:

    async def scenario() -> None:
        async with AsyncClient(server.url) as client:
            await client.deploy({"gate.orbit": GATE})
            started = await client.start("Gate", {"n": 1}, execution_id="g-1")
            assert started.created
            seq = await client.signal("g-1", "approve", {"ok": True})
            assert seq is not None
            assert seq > 0
            done = await client.wait("g-1", timeout=10)
            assert done.status == "completed"
            assert done.output == {"payload": {"ok": True}}
            page = await client.list(status="completed")
            assert "g-1" in [e["execution_id"] for e in page.executions]
            events = await client.history("g-1")
            assert events[0].seq == 1
            assert events[-1].type == "WorkflowCompleted"

    asyncio.run(scenario())
