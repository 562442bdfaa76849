"""The worker against a real server: the seed's flaky-worker redelivery, a
saga that compensates, and a cancellation while a task is held."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from conftest import PLAIN, SAGA, Server

from orbit import AsyncClient, Cancelled, TaskContext, TaskError, TraceContext, Worker


async def run_until(worker: Worker, done: Any) -> Any:
    """Runs ``worker`` until the awaitable ``done`` finishes, then stops it."""
    running = asyncio.create_task(worker.run())
    try:
        return await done
    finally:
        worker.stop()
        await asyncio.wait_for(running, timeout=30)


def test_flaky_worker_task_is_redelivered_with_the_same_key(server: Server) -> None:
    async def scenario() -> None:
        async with AsyncClient(server.url) as client:
            await client.deploy({"plain.orbit": PLAIN})
            await client.start("Plain", {"n": 1}, execution_id="u-1")

            # flaky-1 takes the task, then goes silent.
            async with httpx.AsyncClient(base_url=server.url) as raw:
                r = await raw.post(
                    "/v1/workers", json={"worker_id": "flaky-1", "task_patterns": ["demo.work"]}
                )
                session = r.json()["session_id"]
                r = await raw.post(
                    f"/v1/workers/{session}/poll", json={"max_tasks": 1, "wait_ms": 5000}
                )
                first = r.json()["tasks"][0]
                assert first["attempt"] == 1
                assert first["redelivery"] is False

                seen: list[TaskContext] = []
                worker = Worker(server.url, worker_id="flaky-2", poll_wait=1.0)

                @worker.task("demo.*")
                async def work(ctx: TaskContext) -> dict[str, int]:
                    seen.append(ctx)
                    return {"doubled": 2 * int(ctx.input["n"])}

                execution = await run_until(worker, client.wait("u-1", timeout=30))
                assert execution.status == "completed", execution
                assert execution.output == {"doubled": 2}

                # The redelivery: same attempt, same input and key, flagged.
                assert len(seen) == 1
                ctx = seen[0]
                assert ctx.redelivery is True
                assert ctx.attempt == 1
                assert ctx.idempotency_key == "u-1/work" == first["idempotency_key"]
                assert ctx.input == first["input"]

                # flaky-1 comes back too late: the answer is final.
                r = await raw.post(
                    f"/v1/tasks/{first['token']}/result", json={"output": {"doubled": 2}}
                )
                assert r.json()["accepted"] is False

            events = await client.history("u-1")
            kinds = [e.type for e in events]
            uncertain = [e for e in events if e.type == "StepAttemptUncertain"]
            assert uncertain[0].fields["reason"] == "worker `flaky-1` stopped responding"
            rescheduled = [e for e in events if e.type == "StepScheduled"][1]
            assert rescheduled.fields.get("redelivery") is True
            assert kinds[-1] == "WorkflowCompleted"

    asyncio.run(scenario())


def test_saga_compensates_when_a_later_step_fails(server: Server) -> None:
    calls: list[str] = []

    async def scenario() -> None:
        async with AsyncClient(server.url) as client:
            await client.deploy({"trip.orbit": SAGA})
            worker = Worker(server.url, worker_id="trips", poll_wait=1.0)

            @worker.task("trip.book")
            async def book(ctx: TaskContext) -> dict[str, str]:
                calls.append("book")
                return {"booking": "b-" + ctx.input["trip"]}

            @worker.task("trip.pay")
            def pay(ctx: TaskContext) -> dict[str, bool]:  # a plain function runs in a thread
                calls.append("pay")
                raise TaskError("CARD_DECLINED", "insufficient funds", retryable=False)

            @worker.task("trip.unbook")
            async def unbook(ctx: TaskContext) -> dict[str, Any]:
                calls.append("unbook:" + ctx.input["booking"])
                assert ctx.idempotency_key.endswith("/compensate:book")
                return {}

            started = await client.start("Trip", {"trip": "t1"})
            execution = await run_until(worker, client.wait(started.execution_id, timeout=30))
            assert execution.status == "failed", execution
            assert execution.error["code"] == "CARD_DECLINED"
            kinds = [e.type for e in await client.history(started.execution_id)]
            assert "CompensationStarted" in kinds or any("Compensat" in k for k in kinds), kinds

    asyncio.run(scenario())
    assert calls == ["book", "pay", "unbook:b-t1"]


SLOW = """
task "slow.wait" version "1.0.0" {
    input  { n: Int }
    output { done: Bool }
}

workflow Slow version "1.0.0" {
    input { n: Int }

    step hold {
        worker "slow.wait"
        with { n: input.n }
    }

    output { done: hold.done }
}
"""


def test_cancel_reaches_a_held_task(server: Server) -> None:
    async def scenario() -> None:
        async with AsyncClient(server.url) as client:
            await client.deploy({"slow.orbit": SLOW})
            holding = asyncio.Event()
            stopped: list[bool] = []
            worker = Worker(server.url, worker_id="slow-1", poll_wait=1.0)

            @worker.task("slow.wait")
            async def hold(ctx: TaskContext) -> dict[str, bool]:
                holding.set()
                await asyncio.wait_for(ctx.wait_cancelled(), timeout=20)
                stopped.append(ctx.cancelled)
                raise Cancelled("stopped on request")

            started = await client.start("Slow", {"n": 1})

            async def cancel_when_held() -> Any:
                await holding.wait()
                assert worker.held, "the task is held"
                await client.cancel(started.execution_id, reason="changed my mind")
                return await client.wait(started.execution_id, timeout=30)

            execution = await run_until(worker, cancel_when_held())
            assert execution.status == "cancelled", execution
            assert stopped == [True]

    asyncio.run(scenario())


CALLER = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_a_task_carries_the_trace_context_of_its_attempt(server: Server) -> None:
    seen: list[TaskContext] = []

    async def scenario() -> None:
        async with AsyncClient(server.url) as client:
            await client.deploy({"plain.orbit": PLAIN})
            await client.start("Plain", {"n": 2}, execution_id="tr-1", traceparent=CALLER)
            worker = Worker(server.url, worker_id="tracer", poll_wait=1.0)

            @worker.task("demo.work")
            async def work(ctx: TaskContext) -> dict[str, int]:
                seen.append(ctx)
                return {"doubled": 2 * int(ctx.input["n"])}

            execution = await run_until(worker, client.wait("tr-1", timeout=30))
            assert execution.status == "completed", execution

    asyncio.run(scenario())
    assert len(seen) == 1
    ctx = seen[0]
    assert ctx.traceparent is not None
    cx = ctx.trace_context
    assert cx is not None
    # The caller's trace; the parent is the attempt's span, not the caller's.
    assert cx.trace_id == "0af7651916cd43dd8448eb211c80319c"
    assert len(cx.span_id) == 16
    assert cx.span_id != "b7ad6b7169203331"
    assert cx.sampled
    assert ctx.traceparent == f"00-{cx.trace_id}-{cx.span_id}-01"


def test_trace_context_parsing() -> None:
    assert TraceContext.parse(CALLER) == TraceContext(
        "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331", 1
    )
    for bad in (
        "",
        CALLER.upper(),
        "01" + CALLER[2:],
        "00-" + "0" * 32 + "-b7ad6b7169203331-01",
        "00-0af7651916cd43dd8448eb211c80319c-" + "0" * 16 + "-01",
        CALLER + "-00",
    ):
        assert TraceContext.parse(bad) is None, bad
