"""ORBIT's Python SDK: :class:`Client` and :class:`AsyncClient` to deploy
workflows and drive executions, and :class:`Worker`, an asyncio worker that
runs task handlers. Speaks the HTTP API described by the server's
``/v1/openapi.json``; depends on httpx only."""

from ._failover import DEFAULT_FAILOVER_WINDOW
from .client import DEFAULT_SERVER, AsyncClient, Client
from .errors import (
    ApiError,
    BodyTooLarge,
    ChildNotRegistered,
    CompileError,
    Conflict,
    DefinitionConflict,
    ExecutionExists,
    ExecutionFinished,
    Forbidden,
    IdempotencyKeyInFlight,
    IdempotencyKeyReused,
    InvalidRequest,
    NotFound,
    NotLeader,
    OrbitError,
    TransportError,
    Unauthenticated,
    Unavailable,
    UnknownExecution,
    UnknownSession,
    UnknownWorkflow,
)
from .types import Event, Execution, ExecutionPage, Started, Task, TraceContext
from .worker import Cancelled, TaskContext, TaskError, Worker

__all__ = [
    "DEFAULT_FAILOVER_WINDOW",
    "DEFAULT_SERVER",
    "ApiError",
    "AsyncClient",
    "BodyTooLarge",
    "Cancelled",
    "ChildNotRegistered",
    "Client",
    "CompileError",
    "Conflict",
    "DefinitionConflict",
    "Event",
    "Execution",
    "ExecutionExists",
    "ExecutionFinished",
    "ExecutionPage",
    "Forbidden",
    "IdempotencyKeyInFlight",
    "IdempotencyKeyReused",
    "InvalidRequest",
    "NotFound",
    "NotLeader",
    "OrbitError",
    "Started",
    "Task",
    "TaskContext",
    "TaskError",
    "TraceContext",
    "TransportError",
    "Unauthenticated",
    "Unavailable",
    "UnknownExecution",
    "UnknownSession",
    "UnknownWorkflow",
    "Worker",
]
