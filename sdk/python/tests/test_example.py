"""``examples/python``: the order example end to end, and its saga when the
charge is declined."""

from __future__ import annotations

import asyncio
import sys

from conftest import ROOT, Server

from orbit import AsyncClient, Execution

sys.path.insert(0, str(ROOT / "examples" / "python"))

import order_worker

ORDER_INPUT = {
    "order_id": "o-1",
    "amount": 4200,
    "currency": "EUR",
    "items": [{"sku": "A-1", "qty": 1}, {"sku": "B-2", "qty": 3}],
}


async def run_order(server: Server, *, decline: bool, order_id: str) -> tuple[Execution, list[str]]:
    worker = order_worker.build(server.url, decline=decline)
    worker.poll_wait = 1.0
    running = asyncio.create_task(worker.run())
    try:
        async with AsyncClient(server.url) as client:
            await client.deploy_files([ROOT / "examples" / "order.orbit"])
            started = await client.start(
                "Order", {**ORDER_INPUT, "order_id": order_id}, execution_id=order_id
            )
            execution = await client.wait(started.execution_id, timeout=60)
            steps = [
                str(e.fields.get("step"))
                for e in await client.history(order_id)
                if e.type == "StepSucceeded"
            ]
            return execution, steps
    finally:
        worker.stop()
        await asyncio.wait_for(running, timeout=30)


def test_order_example_completes(server: Server) -> None:
    execution, steps = asyncio.run(run_order(server, decline=False, order_id="o-ok"))
    assert execution.status == "completed", execution
    assert "process_payment" in steps
    assert execution.output["tracking"] == "TRK-o-ok"
    assert execution.output["transaction_id"].startswith("tx-")


def test_declined_order_releases_its_reservations(server: Server) -> None:
    execution, steps = asyncio.run(run_order(server, decline=True, order_id="o-declined"))
    assert execution.status == "failed", execution
    assert execution.error["code"] == "CARD_DECLINED"
    assert sorted(s for s in steps if s.startswith("compensate:")) == [
        "compensate:reserve[0]",
        "compensate:reserve[1]",
    ]
