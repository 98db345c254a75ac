"""The one error type of the HTTP contract: an HTTP status plus a stable ``error.code``."""
from __future__ import annotations


class AuditsyncError(Exception):
    """The root of every exception the project defines."""


class ApiError(AuditsyncError):
    def __init__(self, status: int, code: str, message: str,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"code": self.code, "message": self.message}}


def invalid(message: str) -> ApiError:
    return ApiError(400, "invalid_request", message)


def unauthorized(message: str) -> ApiError:
    return ApiError(401, "unauthorized", message, {"WWW-Authenticate": "Bearer"})


def forbidden(message: str) -> ApiError:
    return ApiError(403, "forbidden", message)


def topic_not_found(topic: str) -> ApiError:
    return ApiError(404, "topic_not_found", f"topic {topic!r} does not exist")


def not_found(message: str) -> ApiError:
    return ApiError(404, "not_found", message)


def too_large(message: str) -> ApiError:
    return ApiError(413, "payload_too_large", message)


def throttled(message: str) -> ApiError:
    return ApiError(429, "throttled", message, {"Retry-After": "2"})


def unavailable(message: str) -> ApiError:
    return ApiError(503, "unavailable", message)
