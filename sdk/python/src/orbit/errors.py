"""The SDK's exceptions: one class per kind of error answer, mapped from the
server's stable ``error.code`` (``docs/src/server/errors.md``), plus the
transport failure raised when no answer came back."""

from __future__ import annotations

from typing import Any


class OrbitError(Exception):
    """Base class of every error the SDK raises."""


class TransportError(OrbitError):
    """No answer came back from the server (after the retries the call allows)."""


class ApiError(OrbitError):
    """The server answered ``{"error": {"code", "message", ...}}`` with a 4xx or 5xx."""

    #: Whether the same request (with the same ``Idempotency-Key``) may be sent again.
    retryable: bool = False

    def __init__(
        self, status: int, code: str, message: str, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(f"{code} ({status}): {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details: dict[str, Any] = details or {}


class InvalidRequest(ApiError):
    """400: the request is malformed or breaks a rule; fix it before sending it again."""


class Unauthenticated(ApiError):
    """401 ``UNAUTHENTICATED``: no bearer token, or an unknown one."""


class Forbidden(ApiError):
    """403 ``FORBIDDEN``: the token's role does not allow this."""


class NotFound(ApiError):
    """404: no such workflow, execution, session or route."""


class UnknownWorkflow(NotFound):
    """404 ``UNKNOWN_WORKFLOW``."""


class UnknownExecution(NotFound):
    """404 ``UNKNOWN_EXECUTION``."""


class UnknownSession(NotFound):
    """404 ``UNKNOWN_SESSION``: the worker registers again."""


class Conflict(ApiError):
    """409: the request conflicts with what is recorded."""


class ExecutionExists(Conflict):
    """409 ``EXECUTION_EXISTS``: the id belongs to another workflow or version."""


class ExecutionFinished(Conflict):
    """409 ``EXECUTION_FINISHED``: signal or cancel for a finished execution."""


class DefinitionConflict(Conflict):
    """409 ``DEFINITION_CONFLICT``: same name and version, other content."""


class ChildNotRegistered(Conflict):
    """409 ``CHILD_NOT_REGISTERED``: deploy the child workflow first."""


class IdempotencyKeyReused(Conflict):
    """409 ``IDEMPOTENCY_KEY_REUSED``: the key was used with another body."""


class IdempotencyKeyInFlight(Conflict):
    """409 ``IDEMPOTENCY_KEY_IN_FLIGHT``: a request with this key is still running."""

    retryable = True


class CompileError(ApiError):
    """422 ``COMPILE_ERROR``: ``diagnostics`` lists what does not compile."""

    @property
    def diagnostics(self) -> list[dict[str, Any]]:
        value = self.details.get("diagnostics")
        return value if isinstance(value, list) else []


class BodyTooLarge(ApiError):
    """413 ``BODY_TOO_LARGE``."""


class Unavailable(ApiError):
    """5xx: nothing was changed; the request may be sent again later."""

    retryable = True


class NotLeader(Unavailable):
    """503 ``NOT_LEADER``: a standby answered; ``leader`` names the leader, if known."""

    @property
    def leader(self) -> str | None:
        value = self.details.get("leader")
        return value if isinstance(value, str) and value else None


_BY_CODE: dict[str, type[ApiError]] = {
    "UNAUTHENTICATED": Unauthenticated,
    "FORBIDDEN": Forbidden,
    "UNKNOWN_WORKFLOW": UnknownWorkflow,
    "UNKNOWN_EXECUTION": UnknownExecution,
    "UNKNOWN_SESSION": UnknownSession,
    "EXECUTION_EXISTS": ExecutionExists,
    "EXECUTION_FINISHED": ExecutionFinished,
    "DEFINITION_CONFLICT": DefinitionConflict,
    "CHILD_NOT_REGISTERED": ChildNotRegistered,
    "IDEMPOTENCY_KEY_REUSED": IdempotencyKeyReused,
    "IDEMPOTENCY_KEY_IN_FLIGHT": IdempotencyKeyInFlight,
    "COMPILE_ERROR": CompileError,
    "BODY_TOO_LARGE": BodyTooLarge,
    "NOT_LEADER": NotLeader,
}

_BY_STATUS: dict[int, type[ApiError]] = {
    400: InvalidRequest,
    401: Unauthenticated,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: BodyTooLarge,
    422: CompileError,
}


def error_from_answer(status: int, body: Any) -> ApiError:
    """The exception for a non-2xx answer with JSON ``body`` (any shape)."""
    detail = body.get("error") if isinstance(body, dict) else None
    if isinstance(detail, dict):
        code = str(detail.get("code") or f"HTTP_{status}")
        message = str(detail.get("message") or "")
        details = {k: v for k, v in detail.items() if k not in ("code", "message")}
    else:
        code, message, details = f"HTTP_{status}", str(body)[:500], {}
    cls = _BY_CODE.get(code)
    if cls is None:
        cls = Unavailable if status >= 500 or status == 429 else _BY_STATUS.get(status, ApiError)
    return cls(status, code, message, details)
