"""The API's JSON bodies as small typed values (the shapes of the OpenAPI
document served at ``/v1/openapi.json``). Each keeps the whole JSON object
in ``raw``, so fields a newer server adds are never lost."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

TERMINAL = frozenset({"completed", "failed", "cancelled"})


@dataclass(frozen=True)
class Started:
    """The answer to a start."""

    execution_id: str
    #: False when an execution with this id already existed.
    created: bool
    #: True when the answer is the stored one for a repeated ``Idempotency-Key``.
    replayed: bool = False


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
        )
