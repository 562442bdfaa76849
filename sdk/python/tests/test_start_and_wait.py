"""A start that waits (``start_and_wait``) against a real server: the finished
execution in the answer, a wait that runs out, a repeat and a retry after a lost
answer that find the same execution, no ``Idempotency-Key`` on the wire, and the
fall-back to ``wait`` against a server that ignores ``wait_ms``."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import httpx
import pytest
from conftest import PLAIN, Server
from test_client import GATE
from test_worker import run_until

from orbit import (
    AsyncClient,
    Client,
    ExecutionExists,
    InvalidRequest,
    TaskContext,
    UnknownWorkflow,
    Worker,
)


class Recorder(httpx.BaseTransport):
    """Sends every request and records the starts. ``drop_first`` loses the answer
    to the first start, as a connection dropped after the server acted would;
    ``old_server`` removes ``wait_ms`` from starts, as if the server ignored it."""

    def __init__(self, *, drop_first: bool = False, old_server: bool = False) -> None:
        self.inner = httpx.HTTPTransport()
        self.drop_first, self.old_server = drop_first, old_server
        self.starts: list[httpx.Request] = []
        self.paths: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(f"{request.method} {request.url.path}")
        starting = request.method == "POST" and request.url.path == "/v1/executions"
        if starting:
            self.starts.append(request)
            if self.old_server:
                request.url = request.url.copy_remove_param("wait_ms")
        response = self.inner.handle_request(request)
        if starting and self.drop_first and len(self.starts) == 1:
            response.read()
            response.close()
            raise httpx.ReadError("connection dropped after the server answered")
        return response


def doubling_worker(server: Server) -> Worker:
    worker = Worker(server.url, worker_id="doubler", poll_wait=1.0)

    @worker.task("demo.work")
    async def work(ctx: TaskContext) -> dict[str, int]:
        return {"doubled": 2 * int(ctx.input["n"])}

    return worker


def test_start_and_wait_returns_the_finished_execution(server: Server) -> None:
    recorder = Recorder()

    async def scenario() -> None:
        async with AsyncClient(server.url) as client:
            await client.deploy({"plain.orbit": PLAIN})

            # The async client, its execution id generated.
            ran = await run_until(
                doubling_worker(server), client.start_and_wait("Plain", {"n": 4}, timeout=30)
            )
            assert ran.created is True
            assert ran.replayed is False
            assert uuid.UUID(ran.execution_id).version == 4
            execution = ran.execution
            assert execution is not None
            assert execution.execution_id == ran.execution_id
            assert execution.status == "completed", execution
            assert execution.output == {"doubled": 8}

            # The blocking client (in a thread), its execution id named.
            with Client(server.url, transport=recorder) as sync:
                ran = await run_until(
                    doubling_worker(server),
                    asyncio.to_thread(
                        sync.start_and_wait, "Plain", {"n": 5}, execution_id="sw-1", timeout=30
                    ),
                )
            assert ran.execution_id == "sw-1"
            assert ran.created is True
            assert ran.execution is not None
            assert ran.execution.status == "completed", ran.execution
            assert ran.execution.output == {"doubled": 10}

            # A repeat with the same id finds the finished execution at once.
            again = await client.start_and_wait("Plain", {"n": 5}, execution_id="sw-1", timeout=30)
            assert again.created is False
            assert again.execution is not None
            assert again.execution.status == "completed"
            assert again.execution.output == {"doubled": 10}

    asyncio.run(scenario())
    # One request: the wait in its query, no Idempotency-Key (the server would refuse it).
    [request] = recorder.starts
    assert request.url.params["wait_ms"] == "30000"
    assert "idempotency-key" not in request.headers
    assert json.loads(request.content)["execution_id"] == "sw-1"
    assert recorder.paths == ["POST /v1/executions"]


def test_a_wait_that_runs_out_returns_the_running_execution(server: Server) -> None:
    with Client(server.url) as client:
        client.deploy({"gate.orbit": GATE, "plain.orbit": PLAIN})
        began = time.monotonic()
        ran = client.start_and_wait("Gate", {"n": 1}, execution_id="g-1", timeout=0.5)
        assert time.monotonic() - began >= 0.45
        assert ran.created is True
        assert ran.execution is not None
        assert not ran.execution.finished
        assert ran.execution.status in ("pending", "running"), ran.execution

        client.signal("g-1", "approve", {"ok": True})
        again = client.start_and_wait("Gate", {"n": 1}, execution_id="g-1", timeout=10)
        assert again.created is False
        assert again.execution is not None
        assert again.execution.status == "completed"
        assert again.execution.output == {"payload": {"ok": True}}

        # The start's errors come back as from a plain start, without waiting.
        with pytest.raises(UnknownWorkflow):
            client.start_and_wait("Nope", {}, timeout=10)
        with pytest.raises(InvalidRequest) as e:
            client.start_and_wait("Plain", {"n": "not a number"}, timeout=10)
        assert e.value.code == "INPUT_CONTRACT_VIOLATION"
        with pytest.raises(ExecutionExists):
            client.start_and_wait("Plain", {"n": 1}, execution_id="g-1", timeout=10)


def test_a_keyed_start_answers_without_waiting(server: Server) -> None:
    # What the SDK never sends: start_and_wait takes no idempotency_key at all.
    # With a key the server answers the start alone (the answer it stores for
    # the key), at once.
    with Client(server.url) as client:
        client.deploy({"gate.orbit": GATE})

        def send() -> httpx.Response:
            return httpx.post(
                f"{server.url}/v1/executions",
                params={"wait_ms": 5000},
                headers={"idempotency-key": "k-1"},
                json={"workflow": "Gate", "input": {"n": 1}, "execution_id": "keyed"},
            )

        began = time.monotonic()
        r = send()
        assert time.monotonic() - began < 4.0
        assert r.status_code == 201
        assert r.json() == {"execution_id": "keyed", "created": True}
        again = send()
        assert again.headers.get("idempotent-replayed") == "true"
        assert again.content == r.content


def test_a_retry_after_a_lost_answer_waits_for_the_same_execution(server: Server) -> None:
    recorder = Recorder(drop_first=True)
    with Client(server.url, transport=recorder, backoff=0.01) as client:
        client.deploy({"gate.orbit": GATE})
        ran = client.start_and_wait("Gate", {"n": 1}, timeout=0.2)
        # Two sends of one generated id; the second found the execution the first made.
        assert len(recorder.starts) == 2
        ids = [json.loads(r.content)["execution_id"] for r in recorder.starts]
        assert ids == [ran.execution_id, ran.execution_id]
        assert all("idempotency-key" not in r.headers for r in recorder.starts)
        assert ran.created is False
        assert ran.execution is not None
        assert not ran.execution.finished
        page = client.list(workflow="Gate")
        assert [e["execution_id"] for e in page.executions] == [ran.execution_id]


def test_a_server_that_ignores_wait_ms_is_waited_for_with_wait(server: Server) -> None:
    recorder = Recorder(old_server=True)
    with Client(server.url) as client:
        client.deploy({"gate.orbit": GATE})
        client.start("Gate", {"n": 1}, execution_id="old-1")
        client.signal("old-1", "approve", {"ok": True})
    with Client(server.url, transport=recorder) as client:
        # A plain start's answer, no execution in it: the SDK goes on with `wait`.
        done = client.start_and_wait("Gate", {"n": 1}, execution_id="old-1", timeout=10)
        assert done.created is False
        assert done.execution is not None
        assert done.execution.status == "completed"
        assert done.execution.output == {"payload": {"ok": True}}
        running = client.start_and_wait("Gate", {"n": 2}, execution_id="old-2", timeout=0.3)
        assert running.created is True
        assert running.execution is not None
        assert not running.execution.finished
    assert recorder.paths == [
        "POST /v1/executions",
        "POST /v1/executions/old-1/wait",
        "POST /v1/executions",
        "POST /v1/executions/old-2/wait",
    ]
