"""The API's JSON bodies as small typed values (the shapes of the OpenAPI
document served at ``/v1/openapi.json``). Each keeps the whole JSON object
in ``raw``, so fields a newer server adds are never lost."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

TERMINAL = frozenset({"completed", "failed", "cancelled"})
_HEX = frozenset("0123456789abcdef")


@dataclass(frozen=True)
class Started:
    """The answer to a start, or to a start that waits."""

    execution_id: str
    #: False when an execution with this id already existed.
    created: bool
    #: True when the answer is the stored one for a repeated ``Idempotency-Key``.
    replayed: bool = False
    #: From a start that waits (``start_and_wait``): the execution when the wait
    #: ended, finished or not (look at ``finished``); None from a plain start.
    execution: Execution | None = None


@dataclass(frozen=True)
class Execution:
    """An execution as ``GET /v1/executions/{id}`` shows it."""

    execution_id: str
    status: str
    workflow: str
    version: str
    input: Any
    output: Any
    error: Any
    units: dict[str, Any]
    raw: dict[str, Any] = field(repr=False)

    @property
    def finished(self) -> bool:
        """Whether the execution has ended (completed, failed or cancelled)."""
        return self.status in TERMINAL

    @staticmethod
    def from_json(v: dict[str, Any]) -> Execution:
        return Execution(
            execution_id=str(v.get("execution_id", "")),
            status=str(v.get("status", "")),
            workflow=str(v.get("workflow", "")),
            version=str(v.get("version", "")),
            input=v.get("input"),
            output=v.get("output"),
            error=v.get("error"),
            units=dict(v.get("units") or {}),
            raw=v,
        )


@dataclass(frozen=True)
class ExecutionPage:
    """One page of ``GET /v1/executions``, newest first."""

    executions: list[dict[str, Any]]
    #: Pass as ``cursor`` for the next page; None on the last page.
    next_cursor: str | None


@dataclass(frozen=True)
class Event:
    """One history event."""

    seq: int
    at: str
    type: str
    #: The event's own fields (``step``, ``attempt``, ``reason``, ...).
    fields: dict[str, Any]

    @staticmethod
    def from_json(v: dict[str, Any]) -> Event:
        rest = {k: x for k, x in v.items() if k not in ("seq", "at", "type")}
        return Event(seq=int(v["seq"]), at=str(v["at"]), type=str(v["type"]), fields=rest)


@dataclass(frozen=True)
class Task:
    """A task handed to a worker (the seed's task JSON)."""

    token: str
    execution_id: str
    workflow: str
    workflow_version: str
    step_id: str
    task_name: str
    contract_version: str
    input: Any
    idempotency_key: str
    attempt: int
    redelivery: bool
    #: W3C trace context naming this attempt's span as parent; None from servers
    #: before trace propagation.
    traceparent: str | None = None

    @staticmethod
    def from_json(v: dict[str, Any]) -> Task:
        return Task(
            token=str(v["token"]),
            execution_id=str(v["execution_id"]),
            workflow=str(v.get("workflow", "")),
            workflow_version=str(v.get("workflow_version", "")),
            step_id=str(v.get("step_id", "")),
            task_name=str(v["task_name"]),
            contract_version=str(v.get("contract_version", "")),
            input=v.get("input"),
            idempotency_key=str(v.get("idempotency_key", "")),
            attempt=int(v.get("attempt", 1)),
            redelivery=bool(v.get("redelivery", False)),
            traceparent=v["traceparent"] if isinstance(v.get("traceparent"), str) else None,
        )


@dataclass(frozen=True)
class TraceContext:
    """A parsed W3C ``traceparent`` (version ``00``): the trace and the parent span a
    handler's own span should join."""

    #: 32 lower-case hex digits.
    trace_id: str
    #: The parent span (the attempt's): 16 lower-case hex digits.
    span_id: str
    flags: int

    @property
    def sampled(self) -> bool:
        return self.flags & 1 == 1

    @staticmethod
    def parse(text: str) -> TraceContext | None:
        """The trace context in ``text``, or None when it is not valid W3C trace context
        of version ``00`` (lower-case hex, ids not all zero)."""
        parts = text.strip().split("-")
        if len(parts) != 4 or parts[0] != "00":
            return None
        _, trace, span, flags = parts
        for value, size in ((trace, 32), (span, 16), (flags, 2)):
            if len(value) != size or not set(value) <= _HEX:
                return None
        if set(trace) == {"0"} or set(span) == {"0"}:
            return None
        return TraceContext(trace_id=trace, span_id=span, flags=int(flags, 16))
