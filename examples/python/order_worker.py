"""A Python worker for every task of ``examples/order.orbit``.

    python examples/python/order_worker.py [--server URL] [--decline]

Side effects are simulated with in-memory dictionaries keyed by the task's
idempotency key, the way a real worker would key its own table or pass the
key to a payment provider: a redelivered task returns what the first
delivery recorded instead of acting twice. ``--decline`` makes every charge
fail (not retryable), so the reservations are compensated (released).
Stop it with Ctrl-C: it finishes what it holds, then unregisters.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import uuid
from typing import Any

from orbit import TaskContext, TaskError, Worker

# What "external systems" recorded, by idempotency key.
reservations: dict[str, str] = {}
charges: dict[str, str] = {}
refunds: dict[str, str] = {}


def build(server: str, *, decline: bool, token: str | None = None) -> Worker:
    worker = Worker(server, worker_id=f"py-orders-{os.getpid()}", token=token, max_tasks=8)

    @worker.task("orders.validate")
    async def validate(ctx: TaskContext) -> dict[str, bool]:
        return {"ok": bool(ctx.input["order_id"])}

    @worker.task("inventory.reserve")
    async def reserve(ctx: TaskContext) -> dict[str, str]:
        rid = reservations.setdefault(ctx.idempotency_key, f"res-{uuid.uuid4().hex[:8]}")
        return {"reservation_id": rid}

    @worker.task("inventory.release")
    async def release(ctx: TaskContext) -> dict[str, Any]:
        reservations.pop(ctx.input["reservation_id"], None)
        return {}

    @worker.task("payments.charge")
    async def charge(ctx: TaskContext) -> dict[str, str]:
        if decline:
            raise TaskError("CARD_DECLINED", "the card was declined", retryable=False)
        tx = charges.setdefault(ctx.idempotency_key, f"tx-{uuid.uuid4().hex[:8]}")
        return {"transaction_id": tx}

    @worker.task("payments.refund")
    async def refund(ctx: TaskContext) -> dict[str, str]:
        rf = refunds.setdefault(ctx.idempotency_key, f"rf-{uuid.uuid4().hex[:8]}")
        return {"refund_id": rf}

    @worker.task("shipping.create")
    async def ship(ctx: TaskContext) -> dict[str, str]:
        return {"tracking": f"TRK-{ctx.input['order_id']}"}

    return worker


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default=os.environ.get("ORBIT_SERVER", "http://127.0.0.1:7373"))
    parser.add_argument("--decline", action="store_true", help="decline every charge")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    worker = build(args.server, decline=args.decline, token=os.environ.get("ORBIT_TOKEN"))
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, worker.stop)
    await worker.run()


if __name__ == "__main__":
    asyncio.run(main())
