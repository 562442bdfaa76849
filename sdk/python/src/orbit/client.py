"""Clients for ORBIT's HTTP API: :class:`Client` (blocking) and
:class:`AsyncClient` (asyncio), with the same methods.

Retry rules (``api.md``): every creating call (deploy, start, signal,
cancel) carries an ``Idempotency-Key`` (a UUIDv4 unless the caller sets
one); a call is made up to 3 times in total with exponential backoff on
429, 5xx, ``IDEMPOTENCY_KEY_IN_FLIGHT`` and connection errors, reusing the
key, so a retried call never acts twice. Reads are retried the same way.
A start that waits (``start_and_wait``) carries no key, since with one the
server answers the start alone; it names its execution id instead (a UUIDv4 unless the
caller sets one), so a retry finds the same execution rather than a new one.
Other 4xx answers are raised at once as the exception class of their code
(:mod:`orbit.errors`).

Several servers (a ``--cluster``): ``server`` may be one URL, several
comma-separated, or a list. A ``503 NOT_LEADER`` answer naming the leader is
followed to the leader's URL; one naming none, a refused connection, an
unreachable server and (with more than one URL) a server that does not answer
within ``timeout`` send the request on to the next URL, for up to
``failover_window`` seconds per attempt (:mod:`orbit._failover`). The server
that answered last is tried first by the next call.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from ._failover import DEFAULT_FAILOVER_WINDOW, MAX_HOPS, ServerChoice, Servers
from .errors import ApiError, TransportError, error_from_answer
from .types import Event, Execution, ExecutionPage, Started

DEFAULT_SERVER = "http://127.0.0.1:7373"
#: Attempts per call, the first included.
DEFAULT_ATTEMPTS = 3
#: Backoff before the second attempt, doubled before each next one.
DEFAULT_BACKOFF = 0.2
#: Leader redirects followed in a row before trying the other servers.
MAX_REDIRECTS = MAX_HOPS
#: The longest the server holds a wait (5 minutes); longer waits are split.
MAX_WAIT = 300.0


def _seg(value: str) -> str:
    return quote(value, safe="")


@dataclass
class _Call:
    method: str
    path: str
    body: Any = None
    params: dict[str, Any] | None = None
    idempotency_key: str | None = None
    timeout: float | None = None
    traceparent: str | None = None


@dataclass
class _Answer:
    status: int
    body: Any
    replayed: bool


def _decode(response: httpx.Response) -> _Answer:
    try:
        body: Any = response.json() if response.content else None
    except ValueError:
        body = response.text
    replayed = response.headers.get("idempotent-replayed", "").lower() == "true"
    return _Answer(response.status_code, body, replayed)


def _retryable(error: ApiError) -> bool:
    return error.retryable or error.status == 429 or error.status >= 500


class _Base(ServerChoice):
    def __init__(
        self,
        server: str | Sequence[str] = DEFAULT_SERVER,
        *,
        token: str | None = None,
        timeout: float = 30.0,
        attempts: int = DEFAULT_ATTEMPTS,
        backoff: float = DEFAULT_BACKOFF,
        failover_window: float = DEFAULT_FAILOVER_WINDOW,
    ) -> None:
        self._servers = Servers(server, failover_window)
        #: The first server configured.
        self.home = self._servers.urls[0]
        self.token = token
        self.timeout = timeout
        self.attempts = max(1, attempts)
        self.backoff = backoff

    def _headers(self, call: _Call) -> dict[str, str]:
        headers = {"accept": "application/json"}
        if self.token:
            headers["authorization"] = f"Bearer {self.token}"
        if call.idempotency_key is not None:
            headers["idempotency-key"] = call.idempotency_key
        if call.traceparent is not None:
            headers["traceparent"] = call.traceparent
        return headers

    def _delay(self, attempt: int) -> float:
        return float(self.backoff * (2 ** (attempt - 1)))

    # --- request bodies shared by both clients ---------------------------------------

    @staticmethod
    def _deploy_call(sources: Mapping[str, str] | None, idempotency_key: str | None) -> _Call:
        files = [{"filename": name, "source": text} for name, text in (sources or {}).items()]
        if not files:
            raise ValueError("deploy needs at least one source file")
        return _Call("POST", "/v1/definitions", {"files": files}, None, idempotency_key)

    @staticmethod
    def _read_files(paths: Iterable[str | Path]) -> dict[str, str]:
        return {Path(p).name: Path(p).read_text(encoding="utf-8") for p in paths}

    @staticmethod
    def _start_call(
        workflow: str,
        input: Any,
        version: str | None,
        execution_id: str | None,
        idempotency_key: str | None,
        traceparent: str | None,
    ) -> _Call:
        body: dict[str, Any] = {"workflow": workflow, "input": input}
        if version is not None:
            body["version"] = version
        if execution_id is not None:
            body["execution_id"] = execution_id
        return _Call("POST", "/v1/executions", body, None, idempotency_key, traceparent=traceparent)

    def _start_and_wait_call(
        self,
        workflow: str,
        input: Any,
        version: str | None,
        execution_id: str | None,
        timeout: float,
        traceparent: str | None,
    ) -> _Call:
        # No Idempotency-Key (with one the server answers the start alone): the
        # named execution id makes a retry find the same execution.
        call = self._start_call(
            workflow, input, version, execution_id or str(uuid.uuid4()), None, traceparent
        )
        ms = int(min(max(timeout, 0.0), MAX_WAIT) * 1000)
        call.params = {"wait_ms": ms}
        call.timeout = ms / 1000 + self.timeout
        return call

    @staticmethod
    def _started(answer: _Answer) -> Started:
        body = answer.body
        seen = body.get("execution")
        execution = Execution.from_json(seen) if isinstance(seen, dict) else None
        return Started(body["execution_id"], bool(body["created"]), answer.replayed, execution)

    @staticmethod
    def _wait_more(started: Started, timeout: float) -> bool:
        """Whether a start that waited must go on with ``wait``: the server answered
        without the execution (a server from before starts that wait), or it is still
        running and the caller's timeout is longer than the server's longest wait."""
        execution = started.execution
        return execution is None or (not execution.finished and timeout > MAX_WAIT)

    @staticmethod
    def _list_params(
        status: str | None, workflow: str | None, limit: int | None, cursor: str | None
    ) -> dict[str, Any]:
        params: dict[str, Any] = {}
        for name, value in (
            ("status", status),
            ("workflow", workflow),
            ("limit", limit),
            ("cursor", cursor),
        ):
            if value is not None:
                params[name] = value
        return params


def _key(call: _Call, creating: bool) -> _Call:
    if creating and call.idempotency_key is None:
        call.idempotency_key = str(uuid.uuid4())
    return call


class Client(_Base):
    """A blocking client. Use it as a context manager, or call :meth:`close`."""

    def __init__(
        self,
        server: str | Sequence[str] = DEFAULT_SERVER,
        *,
        token: str | None = None,
        timeout: float = 30.0,
        attempts: int = DEFAULT_ATTEMPTS,
        backoff: float = DEFAULT_BACKOFF,
        transport: httpx.BaseTransport | None = None,
        failover_window: float = DEFAULT_FAILOVER_WINDOW,
    ) -> None:
        super().__init__(
            server,
            token=token,
            timeout=timeout,
            attempts=attempts,
            backoff=backoff,
            failover_window=failover_window,
        )
        self._http = httpx.Client(timeout=timeout, transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _request(self, call: _Call) -> httpx.Response:
        """One attempt: sent to the servers in turn until one answers or the
        failover window has passed (:mod:`orbit._failover`)."""
        exchange = self._servers.exchange()
        headers = self._headers(call)
        while True:
            try:
                response = self._http.request(
                    call.method,
                    exchange.url + call.path,
                    json=call.body,
                    params=call.params,
                    headers=headers,
                    timeout=call.timeout or self.timeout,
                )
            except httpx.TransportError as e:
                pause = exchange.failed(e)
                if pause is None:
                    raise
            else:
                pause = exchange.answer(response)
                if pause is None:
                    return response
            if pause > 0:
                time.sleep(pause)

    def _send(self, call: _Call, *, creating: bool = False) -> _Answer:
        call = _key(call, creating)
        attempt = 1
        while True:
            try:
                response = self._request(call)
            except httpx.TransportError as e:
                if attempt >= self.attempts:
                    raise TransportError(f"{call.method} {call.path}: {e}") from e
                time.sleep(self._delay(attempt))
                attempt += 1
                continue
            answer = _decode(response)
            if answer.status < 400:
                return answer
            error = error_from_answer(answer.status, answer.body)
            if not _retryable(error) or attempt >= self.attempts:
                raise error
            time.sleep(self._delay(attempt))
            attempt += 1

    def deploy(
        self, sources: Mapping[str, str], *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Compiles and registers ``{filename: source}`` (children may be among them)."""
        answer = self._send(self._deploy_call(sources, idempotency_key), creating=True)
        return dict(answer.body)

    def deploy_files(
        self, paths: Iterable[str | Path], *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Reads ``.orbit`` files and deploys them together."""
        return self.deploy(self._read_files(paths), idempotency_key=idempotency_key)

    def start(
        self,
        workflow: str,
        input: Any = None,
        *,
        version: str | None = None,
        execution_id: str | None = None,
        idempotency_key: str | None = None,
        traceparent: str | None = None,
    ) -> Started:
        """Starts an execution; with ``execution_id`` a repeated start returns the existing one.
        ``traceparent`` (W3C trace context) puts the execution's spans and its tasks in the
        caller's trace; the server ignores an invalid one."""
        call = self._start_call(
            workflow, input, version, execution_id, idempotency_key, traceparent
        )
        return self._started(self._send(call, creating=True))

    def start_and_wait(
        self,
        workflow: str,
        input: Any = None,
        *,
        version: str | None = None,
        execution_id: str | None = None,
        timeout: float = 30.0,
        traceparent: str | None = None,
    ) -> Started:
        """Starts an execution and waits, in the same request, until it has finished or
        ``timeout`` seconds passed; ``execution`` of the answer is the execution then
        (look at ``finished``). Instead of an ``Idempotency-Key`` (with which the server
        answers the start alone, without waiting) the start names its execution id, ``execution_id``
        or a generated UUIDv4, so a retry after a lost answer waits for the same
        execution, and reads ``created=False``. Start errors are raised as by
        :meth:`start`. A longer timeout than the server's 5 minutes, or a server that
        answers without the execution, goes on with :meth:`wait`."""
        deadline = time.monotonic() + timeout
        call = self._start_and_wait_call(
            workflow, input, version, execution_id, timeout, traceparent
        )
        started = self._started(self._send(call))
        if self._wait_more(started, timeout):
            left = max(0.0, deadline - time.monotonic())
            started = replace(started, execution=self.wait(started.execution_id, left))
        return started

    def status(self, execution_id: str) -> Execution:
        """The execution as the server shows it now."""
        answer = self._send(_Call("GET", f"/v1/executions/{_seg(execution_id)}"))
        return Execution.from_json(answer.body)

    def wait(self, execution_id: str, timeout: float = 30.0) -> Execution:
        """Waits until the execution has finished or ``timeout`` seconds passed; look at
        ``finished``. Long timeouts are split into server waits of at most 5 minutes."""
        deadline = time.monotonic() + timeout
        while True:
            left = max(0.0, deadline - time.monotonic())
            ms = int(min(left, MAX_WAIT) * 1000)
            call = _Call(
                "POST",
                f"/v1/executions/{_seg(execution_id)}/wait",
                None,
                {"timeout_ms": ms},
                timeout=ms / 1000 + self.timeout,
            )
            execution = Execution.from_json(self._send(call).body)
            if execution.finished or time.monotonic() >= deadline:
                return execution

    def history(self, execution_id: str, after_seq: int | None = None) -> list[Event]:
        """The execution's history (events after ``after_seq``)."""
        params = {"after_seq": after_seq} if after_seq is not None else None
        call = _Call("GET", f"/v1/executions/{_seg(execution_id)}/history", None, params)
        return [Event.from_json(e) for e in self._send(call).body["events"]]

    def list(
        self,
        *,
        status: str | None = None,
        workflow: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> ExecutionPage:
        """One page of executions, newest first."""
        params = self._list_params(status, workflow, limit, cursor)
        body = self._send(_Call("GET", "/v1/executions", None, params)).body
        return ExecutionPage(list(body["executions"]), body.get("next_cursor"))

    def signal(
        self,
        execution_id: str,
        name: str,
        payload: Any = None,
        *,
        idempotency_key: str | None = None,
    ) -> int | None:
        """Sends a signal; returns the ``seq`` of its ``SignalReceived`` event."""
        path = f"/v1/executions/{_seg(execution_id)}/signals/{_seg(name)}"
        call = _Call("POST", path, {"payload": payload}, None, idempotency_key)
        seq = self._send(call, creating=True).body.get("seq")
        return int(seq) if seq is not None else None

    def cancel(
        self, execution_id: str, reason: str | None = None, *, idempotency_key: str | None = None
    ) -> None:
        """Requests cancellation (a second request changes nothing)."""
        body = {"reason": reason} if reason is not None else {}
        path = f"/v1/executions/{_seg(execution_id)}/cancel"
        self._send(_Call("POST", path, body, None, idempotency_key), creating=True)


class AsyncClient(_Base):
    """An asyncio client with the methods of :class:`Client`."""

    def __init__(
        self,
        server: str | Sequence[str] = DEFAULT_SERVER,
        *,
        token: str | None = None,
        timeout: float = 30.0,
        attempts: int = DEFAULT_ATTEMPTS,
        backoff: float = DEFAULT_BACKOFF,
        transport: httpx.AsyncBaseTransport | None = None,
        failover_window: float = DEFAULT_FAILOVER_WINDOW,
    ) -> None:
        super().__init__(
            server,
            token=token,
            timeout=timeout,
            attempts=attempts,
            backoff=backoff,
            failover_window=failover_window,
        )
        self._http = httpx.AsyncClient(timeout=timeout, transport=transport)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def _request(self, call: _Call) -> httpx.Response:
        """One attempt: sent to the servers in turn until one answers or the
        failover window has passed (:mod:`orbit._failover`)."""
        exchange = self._servers.exchange()
        headers = self._headers(call)
        while True:
            try:
                response = await self._http.request(
                    call.method,
                    exchange.url + call.path,
                    json=call.body,
                    params=call.params,
                    headers=headers,
                    timeout=call.timeout or self.timeout,
                )
            except httpx.TransportError as e:
                pause = exchange.failed(e)
                if pause is None:
                    raise
            else:
                pause = exchange.answer(response)
                if pause is None:
                    return response
            if pause > 0:
                await asyncio.sleep(pause)

    async def _send(self, call: _Call, *, creating: bool = False) -> _Answer:
        call = _key(call, creating)
        attempt = 1
        while True:
            try:
                response = await self._request(call)
            except httpx.TransportError as e:
                if attempt >= self.attempts:
                    raise TransportError(f"{call.method} {call.path}: {e}") from e
                await asyncio.sleep(self._delay(attempt))
                attempt += 1
                continue
            answer = _decode(response)
            if answer.status < 400:
                return answer
            error = error_from_answer(answer.status, answer.body)
            if not _retryable(error) or attempt >= self.attempts:
                raise error
            await asyncio.sleep(self._delay(attempt))
            attempt += 1

    async def deploy(
        self, sources: Mapping[str, str], *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        answer = await self._send(self._deploy_call(sources, idempotency_key), creating=True)
        return dict(answer.body)

    async def deploy_files(
        self, paths: Iterable[str | Path], *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        return await self.deploy(self._read_files(paths), idempotency_key=idempotency_key)

    async def start(
        self,
        workflow: str,
        input: Any = None,
        *,
        version: str | None = None,
        execution_id: str | None = None,
        idempotency_key: str | None = None,
        traceparent: str | None = None,
    ) -> Started:
        call = self._start_call(
            workflow, input, version, execution_id, idempotency_key, traceparent
        )
        return self._started(await self._send(call, creating=True))

    async def start_and_wait(
        self,
        workflow: str,
        input: Any = None,
        *,
        version: str | None = None,
        execution_id: str | None = None,
        timeout: float = 30.0,
        traceparent: str | None = None,
    ) -> Started:
        deadline = time.monotonic() + timeout
        call = self._start_and_wait_call(
            workflow, input, version, execution_id, timeout, traceparent
        )
        started = self._started(await self._send(call))
        if self._wait_more(started, timeout):
            left = max(0.0, deadline - time.monotonic())
            execution = await self.wait(started.execution_id, left)
            started = replace(started, execution=execution)
        return started

    async def status(self, execution_id: str) -> Execution:
        answer = await self._send(_Call("GET", f"/v1/executions/{_seg(execution_id)}"))
        return Execution.from_json(answer.body)

    async def wait(self, execution_id: str, timeout: float = 30.0) -> Execution:
        deadline = time.monotonic() + timeout
        while True:
            left = max(0.0, deadline - time.monotonic())
            ms = int(min(left, MAX_WAIT) * 1000)
            call = _Call(
                "POST",
                f"/v1/executions/{_seg(execution_id)}/wait",
                None,
                {"timeout_ms": ms},
                timeout=ms / 1000 + self.timeout,
            )
            execution = Execution.from_json((await self._send(call)).body)
            if execution.finished or time.monotonic() >= deadline:
                return execution

    async def history(self, execution_id: str, after_seq: int | None = None) -> list[Event]:
        params = {"after_seq": after_seq} if after_seq is not None else None
        call = _Call("GET", f"/v1/executions/{_seg(execution_id)}/history", None, params)
        return [Event.from_json(e) for e in (await self._send(call)).body["events"]]

    async def list(
        self,
        *,
        status: str | None = None,
        workflow: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> ExecutionPage:
        params = self._list_params(status, workflow, limit, cursor)
        body = (await self._send(_Call("GET", "/v1/executions", None, params))).body
        return ExecutionPage(list(body["executions"]), body.get("next_cursor"))

    async def signal(
        self,
        execution_id: str,
        name: str,
        payload: Any = None,
        *,
        idempotency_key: str | None = None,
    ) -> int | None:
        path = f"/v1/executions/{_seg(execution_id)}/signals/{_seg(name)}"
        call = _Call("POST", path, {"payload": payload}, None, idempotency_key)
        seq = (await self._send(call, creating=True)).body.get("seq")
        return int(seq) if seq is not None else None

    async def cancel(
        self, execution_id: str, reason: str | None = None, *, idempotency_key: str | None = None
    ) -> None:
        body = {"reason": reason} if reason is not None else {}
        path = f"/v1/executions/{_seg(execution_id)}/cancel"
        await self._send(_Call("POST", path, body, None, idempotency_key), creating=True)
