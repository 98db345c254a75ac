"""The project's exceptions start here: :class:`AuditsyncError` is the root every exception
class of the project derives from, so a caller can tell our failures from a library's.

:class:`ApiError` is the HTTP contract's error: each subclass carries its HTTP status, its
stable ``error.code`` and any fixed response headers as class data, and an instance carries the
message, which names the value and the rule it broke. ``web.errors`` renders any of them as
``{"error": {"code", "message"}}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import ClassVar


class AuditsyncError(Exception):
    """The root of every exception the project defines."""


class ApiError(AuditsyncError):
    """A failure the HTTP contract reports; unspecialised, it is a 500 ``internal``."""

    status: ClassVar[int] = 500
    code: ClassVar[str] = "internal"
    headers: Mapping[str, str] = MappingProxyType({})

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def body(self) -> dict:
        return {"error": {"code": self.code, "message": self.message}}


class InvalidRequest(ApiError):
    status, code = 400, "invalid_request"


class Unauthorized(ApiError):
    status, code = 401, "unauthorized"
    headers = MappingProxyType({"WWW-Authenticate": "Bearer"})


class Forbidden(ApiError):
    status, code = 403, "forbidden"


class NotFound(ApiError):
    status, code = 404, "not_found"


class TopicNotFound(NotFound):
    code = "topic_not_found"

    def __init__(self, topic: str) -> None:
        super().__init__(f"topic {topic!r} does not exist")
        self.topic = topic


class MethodNotAllowed(ApiError):
    status, code = 405, "method_not_allowed"

    def __init__(self, message: str, allowed: list[str]) -> None:
        super().__init__(message)
        self.headers = {"Allow": ", ".join(allowed)}


class NotAcceptable(ApiError):
    status, code = 406, "not_acceptable"


class PayloadTooLarge(ApiError):
    status, code = 413, "payload_too_large"


class UnsupportedMediaType(ApiError):
    status, code = 415, "unsupported_media_type"


class RequestTimeout(ApiError):
    """The client did not send the request's header or body within the read timeout."""

    status, code = 408, "request_timeout"


class Throttled(ApiError):
    status, code = 429, "throttled"
    headers = MappingProxyType({"Retry-After": "2"})


class Unavailable(ApiError):
    status, code = 503, "unavailable"
