"""Deploys ``examples/order.orbit``, starts one order and waits for it.

    python examples/python/run_order.py [--server URL] [--order-id ID]

Run ``order_worker.py`` beside it. The start carries a client-chosen
execution id, so running this twice with the same ``--order-id`` shows the
same execution instead of starting a second one.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from orbit import Client

ORDER = Path(__file__).resolve().parent.parent / "order.orbit"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default=os.environ.get("ORBIT_SERVER", "http://127.0.0.1:7373"))
    parser.add_argument("--order-id", default="order-1002")
    args = parser.parse_args()
    with Client(args.server, token=os.environ.get("ORBIT_TOKEN")) as client:
        deployed = client.deploy_files([ORDER])
        for w in deployed["workflows"]:
            print(f"deployed {w['name']} {w['version']} (created: {w['created']})")
        started = client.start(
            "Order",
            {
                "order_id": args.order_id,
                "amount": 4200,
                "currency": "EUR",
                "items": [{"sku": "A-1", "qty": 1}, {"sku": "B-2", "qty": 3}],
            },
            execution_id=args.order_id,
        )
        print(f"execution {started.execution_id} (created: {started.created})")
        execution = client.wait(started.execution_id, timeout=120)
        print(f"status: {execution.status}")
        print(f"output: {execution.output}")
        if execution.error:
            print(f"error:  {execution.error}")
        for event in client.history(started.execution_id):
            detail = " ".join(
                f"{k}={v}" for k, v in event.fields.items() if k in ("step", "attempt")
            )
            print(f"  #{event.seq:<3} {event.type} {detail}")


if __name__ == "__main__":
    main()
