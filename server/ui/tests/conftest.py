"""Fixtures of the console's browser tests: a real `orbit server` (child
process) without auth and one with `--auth`, each seeded with executions of
`examples/order.orbit` and `approval.orbit` and served by a small worker
thread; headless Debian Chromium driven by Playwright; screenshots saved
under $CONSOLE_SCREENSHOTS (default `target/console-screenshots`)."""

import json
import os
import pathlib
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request

import pytest
from playwright.sync_api import sync_playwright

ROOT = pathlib.Path(__file__).resolve().parents[3]
HERE = pathlib.Path(__file__).resolve().parent
ORBIT = os.environ.get("ORBIT_BIN", str(ROOT / "target" / "debug" / "orbit"))
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
SHOTS = pathlib.Path(os.environ.get("CONSOLE_SCREENSHOTS", ROOT / "target" / "console-screenshots"))

ADMIN_TOKEN = "console-admin-token"
READER_TOKEN = "console-reader-token"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Api:
    """The HTTP API with an optional bearer token (for seeding and checks)."""

    def __init__(self, base, token=None):
        self.base = base
        self.token = token

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=70) as r:
                text = r.read()
                return r.status, json.loads(text) if text else None
        except urllib.error.HTTPError as e:
            text = e.read()
            return e.code, json.loads(text) if text else None

    def ok(self, method, path, body=None):
        status, answer = self.call(method, path, body)
        assert 200 <= status < 300, f"{method} {path}: {status} {answer}"
        return answer


class Worker(threading.Thread):
    """Serves every task of the example: payments above 10 000 are declined
    (not retryable), so their orders compensate; a charge for `order-slow`
    is held and never answered, so a worker session shows a held task."""

    def __init__(self, api):
        super().__init__(daemon=True)
        self.api = api
        self.stop = threading.Event()
        self.held = []
        answer = api.ok("POST", "/v1/workers", {
            "worker_id": "console-test-worker",
            "task_patterns": ["orders.*", "inventory.*", "payments.*", "shipping.*"],
            "max_tasks": 10,
        })
        self.session = answer["session_id"]

    def outcome(self, task):
        name, inp = task["task_name"], task["input"]
        if name == "orders.validate":
            return {"output": {"ok": True}}
        if name == "inventory.reserve":
            return {"output": {"reservation_id": "res-" + inp["items"][0]["sku"]}}
        if name == "inventory.release":
            return {"output": {}}
        if name == "payments.charge":
            if inp["order_id"] == "order-slow":
                return None
            if inp["amount"] > 10000:
                return {"error": {"code": "CARD_DECLINED", "message": "the card was declined", "retryable": False}}
            return {"output": {"transaction_id": "tx-" + inp["order_id"]}}
        if name == "payments.refund":
            return {"output": {"refund_id": "rf-" + inp["transaction_id"]}}
        if name == "shipping.create":
            return {"output": {"tracking": "TRK-" + inp["order_id"]}}
        return {"error": {"code": "UNKNOWN_TASK", "message": name, "retryable": False}}

    def run(self):
        while not self.stop.is_set():
            status, answer = self.api.call("POST", f"/v1/workers/{self.session}/poll",
                                           {"max_tasks": 10, "wait_ms": 300, "held": self.held})
            if status != 200:
                time.sleep(0.2)
                continue
            for task in answer["tasks"]:
                result = self.outcome(task)
                if result is None:
                    self.held.append(task["token"])
                else:
                    self.api.call("POST", f"/v1/tasks/{task['token']}/result", result)

    def close(self):
        self.stop.set()
        self.join(timeout=5)


class Server:
    """`orbit server` on a free loopback port and a fresh SQLite file."""

    def __init__(self, auth_file=None):
        self.dir = tempfile.TemporaryDirectory(prefix="orbit-console-")
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        args = [ORBIT, "server", "--db", f"sqlite://{self.dir.name}/orbit.db",
                "--listen", f"127.0.0.1:{self.port}", "--session-timeout", "30"]
        if auth_file:
            args += ["--auth", auth_file]
        self.log = open(os.path.join(self.dir.name, "server.log"), "wb")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(self.base + "/readyz", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        self.close()
        raise RuntimeError(f"orbit server did not become ready: {self.base}")

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()
        self.dir.cleanup()


ITEMS = [{"sku": "A-1", "qty": 1}, {"sku": "B-2", "qty": 2}]


def seed(api):
    """Deploys the workflows and starts the executions the tests look at;
    returns the worker serving them."""
    files = [
        {"filename": "order.orbit", "source": (ROOT / "examples" / "order.orbit").read_text()},
        {"filename": "approval.orbit", "source": (HERE / "approval.orbit").read_text()},
    ]
    api.ok("POST", "/v1/definitions", {"files": files})
    worker = Worker(api)
    worker.start()

    def order(oid, amount):
        api.ok("POST", "/v1/executions", {"workflow": "Order", "execution_id": oid,
                                          "input": {"order_id": oid, "amount": amount, "currency": "EUR", "items": ITEMS}})

    order("order-ok", 4200)
    order("order-declined", 99000)
    order("order-slow", 1500)
    for oid in ("approval-1", "approval-2"):
        api.ok("POST", "/v1/executions", {"workflow": "Approval", "execution_id": oid,
                                          "input": {"order_id": oid, "items": ITEMS}})
    for oid, expected in (("order-ok", "completed"), ("order-declined", "failed")):
        got = api.ok("POST", f"/v1/executions/{oid}/wait?timeout_ms=30000")
        assert got["status"] == expected, got
    return worker


@pytest.fixture(scope="session")
def browser():
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"])
        yield b
        b.close()


@pytest.fixture(scope="session")
def open_server():
    server = Server()
    api = Api(server.base)
    worker = seed(api)
    yield server, api
    worker.close()
    server.close()


@pytest.fixture(scope="session")
def auth_server():
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        import hashlib
        for name, role, token in (("ops", "admin", ADMIN_TOKEN), ("oncall", "reader", READER_TOKEN)):
            digest = hashlib.sha256(token.encode()).hexdigest()
            f.write(f'[[tokens]]\nname = "{name}"\nrole = "{role}"\nsha256 = "{digest}"\n\n')
        path = f.name
    server = Server(auth_file=path)
    api = Api(server.base, ADMIN_TOKEN)
    worker = seed(api)
    yield server, api
    worker.close()
    server.close()
    os.unlink(path)


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1360, "height": 900}, color_scheme="light")
    pg = context.new_page()
    errors = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    # The pages must live within their Content-Security-Policy.
    pg.on("console", lambda m: errors.append(m.text) if "Content Security Policy" in m.text else None)
    yield pg
    context.close()
    assert not errors, f"JavaScript errors: {errors}"


def shot(page, name, full_page=True):
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=full_page)
