"""The asyncio worker: registers a session for the task patterns it has
handlers for, long-polls for tasks (listing the tokens it holds), runs each
task's handler, heartbeats, and reports every result.

Rules it follows (``api.md``, seed ``003``):

* Polls and heartbeats list the ``held`` tokens, so after a server restart
  or a re-registration the server re-attaches them to the new session.
* The heartbeat answer's ``cancel`` list sets ``ctx.cancelled`` on those
  tasks; a handler that stops reports ``CANCELLED`` (raise :class:`Cancelled`).
* Results are retried with capped backoff on connection errors and 5xx
  until the server answers; ``accepted: false`` is final and not retried.
* One request per step: by default a finished task's result rides on the
  next poll (``results`` in its body), sent at once and asking for as many
  tasks as there are free slots. That poll waits at the server only when no
  other poll is waiting there (``wait_ms: 0`` otherwise), so a result never
  queues behind a parked long poll; results that finish while it is in
  flight go out together on the next one. ``results_on_poll=False`` (and a
  worker shutting down) reports each result with its own
  ``POST /v1/tasks/{token}/result``.
* ``404 UNKNOWN_SESSION`` makes the worker register again; ``503 NOT_LEADER``
  makes it move to the leader the answer names.
* Several servers (a ``--cluster``): ``server`` may be one URL, several
  comma-separated, or a list. Every request (register, poll, heartbeat,
  result, unregister) follows ``NOT_LEADER`` to the leader, and goes on to the
  next URL when a server refuses the connection, cannot be reached, names no
  leader or (with more than one URL) does not answer in time, for up to
  ``failover_window`` seconds (:mod:`orbit._failover`). A server the worker
  moved to that does not know its session answers ``404 UNKNOWN_SESSION``,
  and the worker registers there.
* Shutdown (:meth:`Worker.stop`, or the ``stop`` event given to
  :meth:`Worker.run`): stop polling, let held tasks finish and report (up
  to ``shutdown_grace`` seconds), then unregister. Tasks still running then
  are left to the server, which delivers them again.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import quote

import httpx

from ._failover import DEFAULT_FAILOVER_WINDOW, ServerChoice, Servers
from .errors import (
    ApiError,
    NotLeader,
    TransportError,
    UnknownSession,
    error_from_answer,
)
from .types import Task, TraceContext

log = logging.getLogger("orbit.worker")

Handler = Callable[["TaskContext"], Any]
H = TypeVar("H", bound=Handler)


class TaskError(Exception):
    """Raise from a handler to fail the attempt with ``code``.

    ``retryable=False`` asks the workflow not to retry (its ``non_retryable``
    list still applies either way).
    """

    def __init__(self, code: str, message: str = "", *, retryable: bool = True) -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message
        self.retryable = retryable

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code, "retryable": self.retryable}
        if self.message:
            body["message"] = self.message
        return body


class Cancelled(TaskError):
    """Raise from a handler that stopped because ``ctx.cancelled`` became true."""

    def __init__(self, message: str = "") -> None:
        super().__init__("CANCELLED", message, retryable=False)


class TaskContext:
    """What a handler gets: the task, its input and key, and whether the server
    wants it stopped."""

    def __init__(self, task: Task) -> None:
        self.task = task
        self._cancelled = asyncio.Event()

    @property
    def input(self) -> Any:
        """The task's input."""
        return self.task.input

    @property
    def idempotency_key(self) -> str:
        """The unit's key: identical across retries and redeliveries. Pass it to
        external systems so a repeated delivery does not act twice."""
        return self.task.idempotency_key

    @property
    def attempt(self) -> int:
        """The attempt number, from 1 (a redelivery keeps its attempt)."""
        return self.task.attempt

    @property
    def redelivery(self) -> bool:
        """True when this attempt was delivered before and its outcome is unknown."""
        return self.task.redelivery

    @property
    def execution_id(self) -> str:
        return self.task.execution_id

    @property
    def task_name(self) -> str:
        return self.task.task_name

    @property
    def traceparent(self) -> str | None:
        """The W3C ``traceparent`` of this attempt's span, as the server sent it. Start
        the handler's own span with it as parent (for example with OpenTelemetry's
        ``TraceContextTextMapPropagator().extract({"traceparent": ctx.traceparent})``)
        and it joins the execution's trace."""
        return self.task.traceparent

    @property
    def trace_context(self) -> TraceContext | None:
        """:attr:`traceparent` parsed; None when absent or invalid."""
        tp = self.task.traceparent
        return TraceContext.parse(tp) if tp is not None else None

    @property
    def cancelled(self) -> bool:
        """True once the server asked to stop this task (cancellation, a timeout, or a
        success reported by another delivery)."""
        return self._cancelled.is_set()

    async def wait_cancelled(self) -> None:
        """Returns when :attr:`cancelled` becomes true."""
        await self._cancelled.wait()

    def _cancel(self) -> None:
        self._cancelled.set()


def _matches(pattern: str, name: str) -> bool:
    if pattern == "*":
        return True
    if pattern.endswith(".*"):
        prefix = pattern[:-2]
        return name.startswith(prefix + ".") and len(name) > len(prefix) + 1
    return pattern == name


class Worker(ServerChoice):
    """Runs task handlers for one worker id. Register handlers with :meth:`task`,
    then ``await worker.run()``."""

    def __init__(
        self,
        server: str | Sequence[str] = "http://127.0.0.1:7373",
        *,
        worker_id: str,
        token: str | None = None,
        max_tasks: int = 4,
        poll_wait: float = 20.0,
        heartbeat_interval: float | None = None,
        shutdown_grace: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
        results_on_poll: bool = True,
        failover_window: float = DEFAULT_FAILOVER_WINDOW,
    ) -> None:
        self._servers = Servers(server, failover_window)
        #: The first server configured.
        self.home = self._servers.urls[0]
        self.worker_id = worker_id
        self.token = token
        self.max_tasks = max(1, max_tasks)
        self.poll_wait = poll_wait
        self.heartbeat_interval = heartbeat_interval
        self.shutdown_grace = shutdown_grace
        self._transport = transport
        self._handlers: dict[str, Handler] = {}
        self._held: dict[str, TaskContext] = {}
        self._running: set[asyncio.Task[None]] = set()
        self._session: str | None = None
        self._session_timeout_ms = 30_000
        self._stop: asyncio.Event | None = None
        self._slot: asyncio.Event | None = None
        self._http: httpx.AsyncClient | None = None
        #: Whether results ride on polls (turned off if the server refuses them).
        self.results_on_poll = results_on_poll
        #: HTTP requests sent (for benchmarks and tests).
        self.requests = 0
        # Finished results waiting for a poll: (token, outcome, settled), where
        # ``settled`` resolves True once the server answered the result, False
        # when it must be reported with the result call instead.
        self._outbox: list[tuple[str, dict[str, Any], asyncio.Future[bool]]] = []
        self._done: set[str] = set()
        self._wake: asyncio.Event | None = None
        self._long = False
        self._quick = False
        self._reserved = 0
        self._failures = 0
        self._fatal: BaseException | None = None
        self._long_poll: asyncio.Task[None] | None = None
        self._exchanges: set[asyncio.Task[None]] = set()

    # --- handlers ---------------------------------------------------------------------

    def task(self, pattern: str) -> Callable[[H], H]:
        """Decorator: the handler of tasks named ``pattern`` (an exact name,
        ``prefix.*`` or ``*``). It gets a :class:`TaskContext` and returns the task's
        output (JSON-serializable); it may be ``async`` or a plain function (run in
        a thread)."""

        def register(handler: H) -> H:
            self.handle(pattern, handler)
            return handler

        return register

    def handle(self, pattern: str, handler: Handler) -> None:
        """Registers ``handler`` for ``pattern`` (what :meth:`task` does)."""
        if not pattern or (pattern != "*" and "*" in pattern.removesuffix(".*")):
            raise ValueError(f"`{pattern}` is not a task pattern (a name, `prefix.*` or `*`)")
        self._handlers[pattern] = handler

    def handler_for(self, task_name: str) -> Handler | None:
        """The handler of ``task_name``: an exact name first, then the longest
        matching ``prefix.*``, then ``*``."""
        if task_name in self._handlers:
            return self._handlers[task_name]
        best = [p for p in self._handlers if p != "*" and _matches(p, task_name)]
        if best:
            return self._handlers[max(best, key=len)]
        return self._handlers.get("*")

    # --- lifecycle --------------------------------------------------------------------

    def stop(self) -> None:
        """Asks :meth:`run` to shut down gracefully."""
        if self._stop is not None:
            self._stop.set()

    @property
    def held(self) -> list[str]:
        """Tokens of the tasks this worker is working on or still reporting."""
        return list(self._held)

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Runs until :meth:`stop` is called or ``stop`` is set, then shuts down
        gracefully. Raises :class:`~orbit.errors.ApiError` when the server refuses
        the worker (for example ``403 FORBIDDEN`` for patterns outside its grant)."""
        if not self._handlers:
            raise ValueError("register at least one handler before running the worker")
        self._stop = stop or asyncio.Event()
        self._slot = asyncio.Event()
        self._wake = asyncio.Event()
        self._long = self._quick = False
        self._reserved = self._failures = 0
        self._fatal = None
        self._outbox = []
        self._http = httpx.AsyncClient(transport=self._transport)
        heartbeats: asyncio.Task[None] | None = None
        try:
            await self._register()
            heartbeats = asyncio.create_task(self._heartbeat_loop())
            await self._poll_loop()
        finally:
            await self._drain()
            for exchange in list(self._exchanges):
                exchange.cancel()
            if self._exchanges:
                await asyncio.wait(set(self._exchanges), timeout=5.0)
            if heartbeats is not None:
                heartbeats.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await heartbeats
            await self._unregister()
            await self._http.aclose()
            self._http = None

    # --- HTTP -------------------------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        h = {"accept": "application/json"}
        if self.token:
            h["authorization"] = f"Bearer {self.token}"
        return h

    async def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        timeout: float = 30.0,
        window: float | None = None,
    ) -> Any:
        """One request; raises ApiError for an error answer, TransportError when none
        came. Follows NOT_LEADER and passes over servers that cannot be reached, for
        up to ``window`` seconds (the failover window by default)."""
        assert self._http is not None
        exchange = self._servers.exchange(window)
        headers = self._headers()
        while True:
            self.requests += 1
            sent = exchange.url
            try:
                r = await self._http.request(
                    method, exchange.url + path, json=body, headers=headers, timeout=timeout
                )
            except httpx.TransportError as e:
                pause = exchange.failed(e)
                if pause is None:
                    raise TransportError(f"{method} {path}: {e}") from e
                log.info("server %s did not answer (%s); trying %s", sent, e, exchange.url)
            else:
                pause = exchange.answer(r)
                if pause is None:
                    break
                log.info("server %s is not the leader; trying %s", sent, exchange.url)
            if pause > 0:
                await asyncio.sleep(pause)
        try:
            data: Any = r.json() if r.content else None
        except ValueError:
            data = r.text
        if r.status_code >= 400:
            raise error_from_answer(r.status_code, data)
        return data

    def _stopping(self) -> bool:
        return self._stop is not None and self._stop.is_set()

    async def _sleep_or_stop(self, seconds: float) -> None:
        assert self._stop is not None
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._stop.wait(), timeout=seconds)

    async def _register(self) -> None:
        delay = 0.1
        while True:
            try:
                body = {
                    "worker_id": self.worker_id,
                    "task_patterns": sorted(self._handlers),
                    "max_tasks": self.max_tasks,
                }
                answer = await self._call("POST", "/v1/workers", body)
            except (TransportError, ApiError) as e:
                if isinstance(e, ApiError) and not (e.retryable or e.status >= 500):
                    raise
                if self._stopping():
                    return
                log.warning("registration failed (%s); retrying", e)
                await self._sleep_or_stop(delay)
                delay = min(delay * 2, 5.0)
                continue
            self._session = str(answer["session_id"])
            self._session_timeout_ms = int(answer.get("session_timeout_ms") or 30_000)
            log.info("worker %s registered: session %s", self.worker_id, self._session)
            if self._held:
                # Re-attach what we hold right away.
                with contextlib.suppress(TransportError, ApiError):
                    await self._heartbeat_once()
            return

    async def _unregister(self) -> None:
        if self._session is None or self._http is None:
            return
        session, self._session = self._session, None
        with contextlib.suppress(TransportError, ApiError):
            # Shutting down: look for a server no longer than the request may take.
            await self._call(
                "DELETE",
                f"/v1/workers/{quote(session, safe='')}",
                timeout=10.0,
                window=min(self.failover_window, 10.0),
            )
            log.info("worker %s unregistered", self.worker_id)

    # --- polling ----------------------------------------------------------------------

    async def _poll_loop(self) -> None:
        """Decides when to poll; each poll runs as a task of its own
        (:meth:`_exchange`)."""
        assert self._stop is not None
        assert self._wake is not None
        stop = asyncio.create_task(self._stop.wait())
        try:
            while not self._stopping():
                if self._fatal is not None:
                    raise self._fatal
                if self._session is None:
                    await self._register()
                    continue
                if self._outbox:
                    # Let other handlers that finish right now join this batch.
                    await asyncio.sleep(0)
                if self._send_next():
                    continue
                self._wake.clear()
                wake = asyncio.create_task(self._wake.wait())
                await asyncio.wait({stop, wake}, return_when=asyncio.FIRST_COMPLETED)
                wake.cancel()
        finally:
            stop.cancel()
            # Shutting down: tasks the server hands to a dropped long poll are
            # delivered again once the session ends; results still waiting go by
            # the result call.
            if self._long_poll is not None and not self._long_poll.done():
                self._long_poll.cancel()
            self._release_outbox()

    def _release_outbox(self) -> None:
        outbox, self._outbox = self._outbox, []
        for _, _, settled in outbox:
            if not settled.done():
                settled.set_result(False)

    def _send_next(self) -> bool:
        if self._session is None:
            return False
        session = self._session
        running = len(self._held) - len(self._done)
        free = self.max_tasks - running - self._reserved
        wait_ms = int(self.poll_wait * 1000)
        wait_ms = max(0, min(wait_ms, self._session_timeout_ms // 2))
        if self._outbox and not self._quick:
            if free <= 0 or not self.results_on_poll:
                self._release_outbox()
                return True
            carried = self._outbox[:1000]
            del self._outbox[:1000]
            long = not self._long
            wait = min(wait_ms, 1000) if long else 0
            self._spawn(session, carried, free, wait, long)
            return True
        if not self._outbox and not self._long and free > 0:
            self._long_poll = self._spawn(session, [], free, wait_ms, True)
            return True
        return False

    def _spawn(
        self,
        session: str,
        carried: list[tuple[str, dict[str, Any], asyncio.Future[bool]]],
        ask: int,
        wait_ms: int,
        long: bool,
    ) -> asyncio.Task[None]:
        if long:
            self._long = True
        else:
            self._quick = True
        self._reserved += ask
        task = asyncio.create_task(self._exchange(session, carried, ask, wait_ms, long))
        self._exchanges.add(task)
        task.add_done_callback(self._exchanges.discard)
        return task

    async def _exchange(
        self,
        session: str,
        carried: list[tuple[str, dict[str, Any], asyncio.Future[bool]]],
        ask: int,
        wait_ms: int,
        long: bool,
    ) -> None:
        """One poll: carries ``carried`` results, asks for ``ask`` tasks, starts the
        tasks it gets and settles the results it carried."""
        retry: list[tuple[str, dict[str, Any], asyncio.Future[bool]]] = []
        failed = False
        try:
            body: dict[str, Any] = {
                "max_tasks": ask,
                "wait_ms": wait_ms,
                "held": [t for t in self._held if t not in self._done],
            }
            if carried:
                body["results"] = [{"token": t, **outcome} for t, outcome, _ in carried]
            path = f"/v1/workers/{quote(session, safe='')}/poll"
            try:
                answer = await self._call("POST", path, body, timeout=wait_ms / 1000 + 15.0)
            except UnknownSession as e:
                retry = self._settle(carried, e.details.get("results"))
                if not self._stopping() and self._session == session:
                    log.info("session expired; registering again")
                    self._session = None
                return
            except NotLeader:
                retry = carried
                if self._session == session:
                    self._session = None
                return
            except ApiError as e:
                if e.retryable or e.status >= 500:
                    log.warning("poll failed (%s); retrying", e)
                    failed, retry = True, carried
                    return
                if not carried:
                    self._fatal = e
                    return
                if e.code == "INVALID_REQUEST":
                    log.warning("the server refused results on a poll (%s); reporting alone", e)
                    self.results_on_poll = False
                for _, _, settled in carried:
                    if not settled.done():
                        settled.set_result(False)
                return
            except TransportError as e:
                log.warning("poll failed (%s); retrying", e)
                failed, retry = True, carried
                return
            for raw in answer.get("tasks") or []:
                self._start(Task.from_json(raw))
            retry = self._settle(carried, answer.get("results"))
            # Results the server could not record yet: back off.
            failed = bool(retry)
        except Exception:
            log.exception("unreadable poll answer; retrying")
            failed, retry = True, [c for c in carried if not c[2].done()]
        finally:
            self._failures = self._failures + 1 if failed else 0
            if failed and not self._stopping():
                await self._sleep_or_stop(min(0.1 * 2 ** (self._failures - 1), 5.0))
            if retry:
                if self._stopping():
                    for _, _, settled in retry:
                        if not settled.done():
                            settled.set_result(False)
                else:
                    self._outbox[:0] = retry
            self._reserved -= ask
            if long:
                self._long = False
            else:
                self._quick = False
            if self._wake is not None:
                self._wake.set()

    def _settle(
        self,
        carried: list[tuple[str, dict[str, Any], asyncio.Future[bool]]],
        answers: Any,
    ) -> list[tuple[str, dict[str, Any], asyncio.Future[bool]]]:
        """Settles carried results by their answers (in order); returns those to
        report again (a 5xx answer, or none)."""
        answers = answers if isinstance(answers, list) else []
        again = []
        for i, item in enumerate(carried):
            token, _, settled = item
            answer = answers[i] if i < len(answers) else None
            if not isinstance(answer, dict) or answer.get("token") != token:
                answer = next(
                    (a for a in answers if isinstance(a, dict) and a.get("token") == token), None
                )
            status = int(answer.get("status", 0)) if answer is not None else 0
            if answer is None or status == 429 or status >= 500:
                again.append(item)
                continue
            if status != 200:
                log.error("result for %s refused: %s", token, answer.get("error"))
            elif not answer.get("accepted", False):
                log.info("result for %s not used: %s", token, answer.get("reason"))
            if not settled.done():
                settled.set_result(True)
        return again

    # --- heartbeats -------------------------------------------------------------------

    def _heartbeat_period(self) -> float:
        if self.heartbeat_interval is not None:
            return self.heartbeat_interval
        return float(min(max(self._session_timeout_ms / 3000, 0.1), 10.0))

    async def _heartbeat_once(self) -> None:
        if self._session is None:
            return
        path = f"/v1/workers/{quote(self._session, safe='')}/heartbeat"
        answer = await self._call("POST", path, {"held": list(self._held)}, timeout=10.0)
        for token in answer.get("cancel") or []:
            ctx = self._held.get(token)
            if ctx is not None and not ctx.cancelled:
                log.info("server cancelled task %s (%s)", token, ctx.task_name)
                ctx._cancel()

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self._heartbeat_period())
            try:
                await self._heartbeat_once()
            except UnknownSession:
                if not self._stopping():
                    await self._register()
            except (TransportError, ApiError) as e:
                log.warning("heartbeat failed: %s", e)

    # --- running tasks ----------------------------------------------------------------

    def _start(self, task: Task) -> None:
        ctx = TaskContext(task)
        self._held[task.token] = ctx
        running = asyncio.create_task(self._run_task(ctx))
        self._running.add(running)
        running.add_done_callback(self._running.discard)

    async def _run_task(self, ctx: TaskContext) -> None:
        task = ctx.task
        handler = self.handler_for(task.task_name)
        outcome: dict[str, Any]
        try:
            if handler is None:
                raise TaskError("NO_HANDLER", f"no handler for {task.task_name}", retryable=True)
            if inspect.iscoroutinefunction(handler):
                output = await handler(ctx)
            else:
                output = await asyncio.to_thread(handler, ctx)
                if inspect.isawaitable(output):
                    output = await output
            outcome = {"output": output}
        except TaskError as e:
            outcome = {"error": e.to_json()}
        except asyncio.CancelledError:
            if not ctx.cancelled:
                # The worker is shutting down past its grace: leave the task to
                # the server, which delivers it again.
                self._held.pop(task.token, None)
                raise
            outcome = {"error": Cancelled().to_json()}
        except Exception as e:
            log.exception("handler of %s failed", task.task_name)
            outcome = {"error": TaskError("HANDLER_ERROR", repr(e)[:1000]).to_json()}
        try:
            if await self._on_next_poll(task.token, outcome) is False:
                await self._report(task.token, outcome)
        finally:
            self._held.pop(task.token, None)
            self._done.discard(task.token)
            if self._slot is not None:
                self._slot.set()
            if self._wake is not None:
                self._wake.set()

    async def _on_next_poll(self, token: str, outcome: dict[str, Any]) -> bool:
        """Queues a result for the next poll and waits for its answer; False when it
        must be reported with the result call instead."""
        if not self.results_on_poll or self._stopping() or self._wake is None:
            return False
        settled: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._done.add(token)
        self._outbox.append((token, outcome, settled))
        self._wake.set()
        return await settled

    async def _report(self, token: str, outcome: dict[str, Any]) -> None:
        """Reports until the server answers (non-5xx); ``accepted: false`` is final."""
        delay = 0.1
        path = f"/v1/tasks/{quote(token, safe='')}/result"
        while True:
            try:
                answer = await self._call("POST", path, outcome, timeout=30.0)
            except (TransportError, ApiError) as e:
                if isinstance(e, ApiError) and not (e.retryable or e.status >= 500):
                    log.error("result for %s refused: %s", token, e)
                    return
                log.warning("result for %s not delivered (%s); retrying", token, e)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            if not answer.get("accepted", False):
                log.info("result for %s not used: %s", token, answer.get("reason"))
            return

    async def _drain(self) -> None:
        """Lets running tasks finish and report, up to ``shutdown_grace``."""
        if not self._running:
            return
        log.info("waiting for %d running task(s)", len(self._running))
        _, pending = await asyncio.wait(set(self._running), timeout=self.shutdown_grace)
        for t in pending:
            t.cancel()
        if pending:
            await asyncio.wait(pending, timeout=5.0)
