"""The web console in headless Chromium against a real `orbit server`:
the list and its filters, a compensated execution's timeline and graph,
signalling and cancelling a running execution (and a refused action's
error), the definitions and workers pages, and auth with a read-only
token. Every page is saved as a screenshot."""

import json
import re
import subprocess

from playwright.sync_api import expect

from conftest import ADMIN_TOKEN, ORBIT, READER_TOKEN, shot

TIMEOUT = 15_000


def rows(page):
    return page.locator("#executions tbody tr[data-id]")


def test_list_shows_every_execution_and_filters(page, open_server):
    server, _ = open_server
    page.goto(server.base + "/ui")
    expect(page.locator("h1")).to_have_text("Executions")
    for oid in ("order-ok", "order-declined", "order-slow", "approval-1"):
        expect(page.locator(f'#executions tr[data-id="{oid}"]')).to_be_visible(timeout=TIMEOUT)
    expect(page.locator('#executions tr[data-id="order-ok.ship"]')).to_be_visible()
    shot(page, "executions")

    page.select_option("#status", "failed")
    expect(page).to_have_url(re.compile(r"status=failed"))
    expect(rows(page)).to_have_count(1, timeout=TIMEOUT)
    expect(rows(page).first).to_have_attribute("data-id", "order-declined")

    page.select_option("#status", "")
    page.select_option("#workflow", "Order")
    expect(page.locator("#version option")).to_have_count(2)
    page.select_option("#version", "1.0.0")
    page.fill("#id_prefix", "order-")
    page.click("form.filters button[type=submit]")
    expect(page).to_have_url(re.compile(r"workflow=Order.*version=1\.0\.0.*id_prefix=order-"))
    expect(rows(page)).to_have_count(3, timeout=TIMEOUT)
    expect(page.locator('#executions tr[data-id="order-ok.ship"]')).to_have_count(0)
    shot(page, "executions-filtered")

    page.fill("#id_prefix", "nothing-like-this")
    page.press("#id_prefix", "Enter")
    expect(page.locator("#executions td.empty")).to_contain_text("No execution matches")


def test_list_pages_newest_first(page, open_server):
    server, api = open_server
    for i in range(30):
        api.ok("POST", "/v1/executions", {"workflow": "Approval", "execution_id": f"page-{i:02}",
                                          "input": {"order_id": f"page-{i:02}", "items": []}})
    page.goto(server.base + "/ui?id_prefix=page-")
    expect(rows(page)).to_have_count(25, timeout=TIMEOUT)
    expect(rows(page).first).to_have_attribute("data-id", "page-29")
    page.click('a[rel="next"]')
    expect(page).to_have_url(re.compile(r"id_prefix=page-&cursor="))
    expect(rows(page)).to_have_count(5, timeout=TIMEOUT)
    expect(rows(page).first).to_have_attribute("data-id", "page-04")
    expect(page.locator('a[rel="next"]')).to_have_count(0)
    page.click('a:text-is("⟵ Newest")')
    expect(rows(page).first).to_have_attribute("data-id", "page-29", timeout=TIMEOUT)


def test_list_updates_status_live(page, open_server):
    server, api = open_server
    api.ok("POST", "/v1/executions", {"workflow": "Approval", "execution_id": "approval-live",
                                      "input": {"order_id": "approval-live", "items": [{"sku": "L", "qty": 1}]}})
    page.goto(server.base + "/ui?workflow=Approval")
    row = page.locator('#executions tr[data-id="approval-live"]')
    expect(row.locator(".badge")).to_have_text("running", timeout=TIMEOUT)
    api.ok("POST", "/v1/executions/approval-live/signals/approve", {"payload": True})
    expect(row.locator(".badge")).to_have_text("completed", timeout=TIMEOUT)


def test_compensated_execution_shows_its_compensation(page, open_server):
    server, _ = open_server
    page.goto(server.base + "/ui?status=failed")
    page.click('a:text-is("order-declined")')
    expect(page).to_have_url(re.compile(r"/ui/executions/order-declined$"))
    expect(page.locator("#execution-title")).to_have_text("order-declined")
    expect(page.locator(".title-row .badge")).to_have_text("failed")
    expect(page.locator(".io.error")).to_contain_text("CARD_DECLINED")
    expect(page.locator("dl.facts")).to_contain_text("Order 1.0.0")

    timeline = page.locator("#timeline")
    comp_rows = timeline.locator('g.unit.compensation[data-unit^="compensate:reserve"]')
    expect(comp_rows).to_have_count(2)
    expect(comp_rows.first.locator("g.bar.succeeded")).to_have_count(1)
    expect(timeline.locator('[data-rule="compensation"]')).to_contain_text("compensation (failed)")
    expect(timeline.locator('g.unit[data-unit="process_payment"] g.bar.failed')).to_have_count(1)

    graph = page.locator("#graph")
    expect(graph.locator('[data-node="compensate:reserve"]')).to_have_attribute("data-state", "succeeded")
    expect(graph.locator('[data-node="process_payment"]')).to_have_attribute("data-state", "failed")
    expect(graph.locator('[data-node="reserve"]')).to_contain_text("succeeded 2/2")
    expect(graph.locator('[data-node="ship"]')).to_have_attribute("data-state", "idle")

    history = page.locator("#history")
    line = history.locator("button.line", has_text="CompensationStarted reason=failed")
    expect(line).to_have_count(1)
    expect(history).to_contain_text("WorkflowFailed code=CARD_DECLINED step=process_payment")
    line.click()
    expect(line).to_have_attribute("aria-expanded", "true")
    expect(history.locator("pre.event-json:visible")).to_contain_text('"type": "CompensationStarted"')
    # No actions on a finished execution.
    expect(page.locator("#signal-button")).to_have_count(0)
    expect(page.locator("#cancel-button")).to_have_count(0)
    shot(page, "execution-compensated")


def test_completed_execution_links_its_child(page, open_server):
    server, _ = open_server
    page.goto(server.base + "/ui/executions/order-ok")
    expect(page.locator(".title-row .badge")).to_have_text("completed")
    expect(page.locator(".io")).to_contain_text(["Input", "Output"])
    page.click('dl.facts a:text-is("order-ok.ship")')
    expect(page.locator("#execution-title")).to_have_text("order-ok.ship")
    expect(page.locator("dl.facts")).to_contain_text("order-ok")
    page.click('dl.facts a:text-is("order-ok")')
    expect(page.locator("#execution-title")).to_have_text("order-ok")
    shot(page, "execution-completed")


def test_signal_then_cancel_a_running_execution(page, open_server):
    server, _ = open_server
    page.goto(server.base + "/ui/executions/approval-1")
    expect(page.locator(".title-row .badge")).to_have_text("running")
    expect(page.locator("#follow-state")).to_have_text("Following live…", timeout=TIMEOUT)
    expect(page.locator('#graph [data-node="approve"]')).to_have_attribute("data-state", "running", timeout=TIMEOUT)
    expect(page.locator("#waiting-on")).to_have_text("approve — waiting for the signal")

    page.click("#signal-button")
    dialog = page.locator("#signal-dialog")
    expect(dialog).to_be_visible()
    page.fill("#signal-name", "comment")
    page.fill("#signal-payload", "{not json")
    page.click("#signal-review")
    expect(dialog.locator(".error-box")).to_contain_text("INVALID_JSON")
    page.fill("#signal-payload", '{"text": "checked by the on-call engineer"}')
    page.click("#signal-review")
    expect(dialog).to_contain_text("Send signal comment to approval-1")
    shot(page, "signal-confirm", full_page=False)
    page.click("#signal-send")
    expect(dialog).to_have_count(0)
    expect(page.locator("#notice")).to_contain_text("Signal comment recorded")
    expect(page.locator("#history")).to_contain_text(re.compile(r"SignalReceived name=comment seq=\d+"), timeout=TIMEOUT)
    expect(page.locator('#timeline [data-unit="signals"]')).to_have_count(1, timeout=TIMEOUT)
    shot(page, "execution-running")

    page.click("#cancel-button")
    cancel = page.locator("#cancel-dialog")
    expect(cancel).to_contain_text("cannot be undone")
    page.click("#cancel-keep")
    expect(cancel).to_have_count(0)
    expect(page.locator(".title-row .badge")).to_have_text("running")
    page.click("#cancel-button")
    page.fill("#cancel-reason", "customer called")
    shot(page, "cancel-confirm", full_page=False)
    page.click("#cancel-confirm")
    expect(page.locator("#history")).to_contain_text("WorkflowCancelRequested reason=customer called", timeout=TIMEOUT)
    expect(page.locator("#history")).to_contain_text("CompensationStarted reason=cancelled", timeout=TIMEOUT)
    expect(page.locator("#history")).to_contain_text("WorkflowCancelled", timeout=TIMEOUT)
    expect(page.locator(".title-row .badge")).to_have_text("cancelled", timeout=TIMEOUT)
    expect(page.locator("#signal-button")).to_have_count(0)
    expect(page.locator('#timeline [data-rule="cancel"]')).to_have_count(1)
    expect(page.locator('#graph [data-node="compensate:hold"]')).to_have_attribute("data-state", "succeeded", timeout=TIMEOUT)
    shot(page, "execution-cancelled")


def test_a_refused_action_shows_the_api_error(page, open_server):
    server, api = open_server
    page.goto(server.base + "/ui/executions/approval-2")
    expect(page.locator("#signal-button")).to_be_visible()
    page.click("#signal-button")
    page.fill("#signal-name", "comment")
    page.click("#signal-review")
    # Someone else cancels it meanwhile.
    api.ok("POST", "/v1/executions/approval-2/cancel", {"reason": "elsewhere"})
    api.ok("POST", "/v1/executions/approval-2/wait?timeout_ms=20000")
    page.click("#signal-send")
    error = page.locator("#signal-dialog .error-box")
    expect(error).to_contain_text("EXECUTION_FINISHED")
    shot(page, "signal-refused", full_page=False)


def test_definitions_show_source_hash_and_graph(page, open_server):
    server, api = open_server
    page.goto(server.base + "/ui/definitions")
    expect(page.locator("#definitions")).to_contain_text("Approval")
    shot(page, "definitions")
    page.click('#definitions a:text-is("Order")')
    expect(page).to_have_url(re.compile(r"/ui/definitions/Order/1\.0\.0$"))
    expected = api.ok("GET", "/v1/definitions/Order/1.0.0")["definition_hash"]
    expect(page.locator("#definition-hash")).to_have_text(expected)
    expect(page.locator("#source")).to_contain_text("workflow Order version")
    graph = page.locator("#graph")
    for step in ("validate_order", "reserve", "process_payment", "cool_off", "ship", "compensate:reserve", "compensate:process_payment"):
        expect(graph.locator(f'[data-node="{step}"]')).to_have_count(1)
    expect(graph.locator('[data-node="reserve"].fan')).to_have_count(1)
    expect(graph.locator('path.edge[data-from="reserve"][data-to="process_payment"]')).to_have_count(1)
    shot(page, "definition")


def test_workers_show_sessions_and_held_tasks(page, open_server):
    server, _ = open_server
    page.goto(server.base + "/ui/workers")
    row = page.locator("#workers tbody tr", has_text="console-test-worker")
    expect(row).to_be_visible(timeout=TIMEOUT)
    expect(row).to_contain_text("payments.*")
    expect(row).to_contain_text(re.compile(r"just now|\ds ago"))
    expect(row.locator('a:text-is("order-slow")')).to_have_count(1, timeout=TIMEOUT)
    expect(row).to_contain_text("process_payment (payments.charge")
    shot(page, "workers")


def test_auth_reader_sees_no_actions_and_admin_does(page, auth_server):
    server, _ = auth_server
    page.goto(server.base + "/ui/executions/approval-1")
    expect(page.locator("#signin-title")).to_be_visible()
    page.fill("#token", "not-a-token")
    page.click("form.signin button[type=submit]")
    expect(page.locator("form.signin .error-box")).to_contain_text("UNAUTHENTICATED")
    shot(page, "signin", full_page=False)

    page.fill("#token", READER_TOKEN)
    page.click("form.signin button[type=submit]")
    expect(page.locator("#who")).to_contain_text("oncall")
    expect(page.locator("#who .role")).to_have_text("reader")
    expect(page.locator("#execution-title")).to_have_text("approval-1")
    expect(page.locator(".title-row .badge")).to_have_text("running")
    expect(page.locator("#history")).to_contain_text("StepScheduled")
    expect(page.locator("#signal-button")).to_have_count(0)
    expect(page.locator("#cancel-button")).to_have_count(0)
    expect(page.locator("#read-only")).to_contain_text("reader token cannot signal or cancel")
    shot(page, "reader-execution")
    page.click('nav a:text-is("Workers")')
    expect(page.locator("#workers")).to_contain_text("console-test-worker", timeout=TIMEOUT)

    page.click('#who button:text-is("Sign out")')
    expect(page.locator("#signin-title")).to_be_visible()
    page.fill("#token", ADMIN_TOKEN)
    page.click("form.signin button[type=submit]")
    expect(page.locator("#who .role")).to_have_text("admin")
    page.goto(server.base + "/ui/executions/approval-1")
    expect(page.locator("#signal-button")).to_be_visible()
    expect(page.locator("#cancel-button")).to_be_visible()


def test_history_reads_exactly_as_orbit_logs(page, open_server):
    server, _ = open_server
    for oid in ("order-declined", "order-ok"):
        cli = subprocess.run([ORBIT, "logs", oid, "--server", server.base],
                             capture_output=True, text=True, check=True, timeout=30)
        page.goto(f"{server.base}/ui/executions/{oid}")
        expect(page.locator("#history button.line").first).to_be_visible()
        lines = page.locator("#history button.line").all_inner_texts()
        assert lines == cli.stdout.splitlines()


UNCERTAIN_HISTORY = """[
  {"seq": 1, "at": "2026-01-01T00:00:00.000Z", "type": "WorkflowCreated"},
  {"seq": 2, "at": "2026-01-01T00:00:00.000Z", "type": "WorkflowStarted"},
  {"seq": 3, "at": "2026-01-01T00:00:00.000Z", "type": "StepScheduled", "step": "charge", "attempt": 1,
   "redelivery": false, "idempotency_key": "charge-o-9", "task": "payments.charge"},
  {"seq": 4, "at": "2026-01-01T00:00:00.040Z", "type": "StepDispatched", "step": "charge", "attempt": 1, "worker_id": "pay-1"},
  {"seq": 5, "at": "2026-01-01T00:00:32.100Z", "type": "StepAttemptUncertain", "step": "charge", "attempt": 1,
   "reason": "worker `pay-1` stopped responding"},
  {"seq": 6, "at": "2026-01-01T00:00:32.100Z", "type": "StepScheduled", "step": "charge", "attempt": 1,
   "redelivery": true, "idempotency_key": "charge-o-9", "task": "payments.charge"},
  {"seq": 7, "at": "2026-01-01T00:00:32.300Z", "type": "StepDispatched", "step": "charge", "attempt": 1, "worker_id": "pay-2"},
  {"seq": 8, "at": "2026-01-01T00:00:32.500Z", "type": "StepSucceeded", "step": "charge", "attempt": 1},
  {"seq": 9, "at": "2026-01-01T00:00:32.500Z", "type": "WorkflowCompleted", "output": {}}
]"""


def test_timeline_marks_uncertain_attempts_and_redeliveries(page, open_server):
    # The crash-mid-charge history of histories.md, drawn by the console's
    # own modules in the page.
    server, _ = open_server
    page.goto(server.base + "/ui/definitions")
    expect(page.locator("#definitions")).to_be_visible()
    result = page.evaluate("""async (events) => {
        const tl = await import('/ui/assets/timeline.js');
        const fmt = await import('/ui/assets/format.js');
        const box = document.createElement('div');
        document.getElementById('main').append(box);
        tl.drawTimeline(box, {status: 'completed'}, events);
        const origin = Date.parse(events[0].at);
        return {
            bars: [...box.querySelectorAll('g.bar')].map((b) => b.getAttribute('class')),
            marks: [...box.querySelectorAll('text.mark')].map((t) => t.textContent),
            lines: events.map((e) => fmt.logLine('o-9', origin, e)),
        };
    }""", json.loads(UNCERTAIN_HISTORY))
    assert result["bars"] == ["bar uncertain", "bar succeeded redelivery"]
    assert sorted(result["marks"]) == ["?", "↻"]
    assert result["lines"][4] == "+ 32.1s #5 StepAttemptUncertain step=charge attempt=1 reason=worker `pay-1` stopped responding"
    assert result["lines"][5] == "+ 32.1s #6 StepScheduled step=charge attempt=1 redelivery=true key=charge-o-9"
