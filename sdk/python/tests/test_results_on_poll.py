"""Results ride on polls: the worker reports each result on its next poll
(``results`` in the body) instead of a separate result call, unless told
otherwise; a server that answers a result per item 5xx gets it again."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
from conftest import Server

from orbit import AsyncClient, TaskContext, Worker

CHAIN = """
task "demo.step" version "1.0.0" {
    input  { n: Int }
    output { n: Int }
}

workflow Chain version "1.0.0" {
    input { n: Int }
    step a {
        worker "demo.step"
        with { n: input.n }
    }
    step b {
        worker "demo.step"
        with { n: a.n }
    }
    step c {
        worker "demo.step"
        with { n: b.n }
    }
    output { n: c.n }
}
"""


class Recording(httpx.AsyncBaseTransport):
    """Passes requests on, remembering each one's path and JSON body."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.seen: list[tuple[str, Any]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        self.seen.append((request.url.path, body))
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def run_chain(server: Server, worker: Worker, count: int) -> None:
    async with AsyncClient(server.url) as client:
        await client.deploy({"chain.orbit": CHAIN})

        @worker.task("demo.step")
        async def step(ctx: TaskContext) -> dict[str, int]:
            return {"n": int(ctx.input["n"]) + 1}

        running = asyncio.create_task(worker.run())
        try:
            ids = [(await client.start("Chain", {"n": i})).execution_id for i in range(count)]
            for i, eid in enumerate(ids):
                execution = await client.wait(eid, timeout=30)
                assert execution.status == "completed", execution
                assert execution.output == {"n": i + 3}
        finally:
            worker.stop()
            await asyncio.wait_for(running, timeout=30)


def test_results_ride_on_polls_by_default(server: Server) -> None:
    recording = Recording()
    worker = Worker(server.url, worker_id="w", poll_wait=1.0, max_tasks=8, transport=recording)
    asyncio.run(run_chain(server, worker, 10))
    paths = [p for p, _ in recording.seen]
    assert not [p for p in paths if p.startswith("/v1/tasks/")], paths
    carried = [
        r for p, b in recording.seen if p.endswith("/poll") and b for r in b.get("results", [])
    ]
    assert len(carried) == 30, carried
    assert all(set(r) == {"token", "output"} for r in carried)
    # Fewer requests than two per step (a poll and a result each).
    assert worker.requests == len(recording.seen)
    assert worker.requests < 2 * 30, worker.requests


def test_the_result_call_when_asked(server: Server) -> None:
    recording = Recording()
    worker = Worker(
        server.url, worker_id="w", poll_wait=1.0, transport=recording, results_on_poll=False
    )
    asyncio.run(run_chain(server, worker, 2))
    results = [p for p, _ in recording.seen if p.startswith("/v1/tasks/")]
    assert len(results) == 6, results
    assert not [b for p, b in recording.seen if p.endswith("/poll") and b and "results" in b]


class FailFirstResult(Recording):
    """Answers the first poll that carries a result as if its commit had failed
    (``503`` for that result), without passing it on."""

    def __init__(self) -> None:
        super().__init__()
        self.failed = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        if not self.failed and isinstance(body, dict) and body.get("results"):
            self.failed = True
            self.seen.append((request.url.path, body))
            answers = [
                {
                    "token": r["token"],
                    "status": 503,
                    "error": {"code": "STORAGE_ERROR", "message": "injected"},
                }
                for r in body["results"]
            ]
            return httpx.Response(200, json={"tasks": [], "results": answers})
        return await super().handle_async_request(request)


def test_a_result_answered_5xx_is_reported_again(server: Server) -> None:
    transport = FailFirstResult()
    worker = Worker(server.url, worker_id="w", poll_wait=1.0, transport=transport)
    asyncio.run(run_chain(server, worker, 1))
    assert transport.failed
    tokens = [
        r["token"]
        for p, b in transport.seen
        if p.endswith("/poll") and b
        for r in b.get("results", [])
    ]
    # The first result went twice, then the other two steps' once each.
    assert len(tokens) == 4, tokens
    assert tokens[0] == tokens[1]
