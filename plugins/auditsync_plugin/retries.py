"""Retries for faults, never for findings.

A step that fails because something it talks to is briefly away — a refused or reset
connection, a PostgreSQL failover or restart in progress, the Spark Connect server restarting
(unreachable, or back without the session and operations the step held) — is retried with
exponential backoff. Anything else fails at once: a verdict (verify's gate, the
quality checkpoint, the sink sensor's timeout) raises ``AirflowFailException``, which Airflow
never retries, and an error we cannot name as transient is a bug or a finding that a retry
would only repeat.

:func:`classify` is the pure rule (it reads exception types and attributes, imports neither
psycopg nor grpc); :class:`TransientFaultPolicy` hands its answer to Airflow's retry-policy
hook (``retry_policy``, evaluated in the task's process); :data:`RETRY_ARGS` is what a DAG's
``default_args`` take, and :func:`retry_args` the same with the first retry's delay an operator
set (``AUDITSYNC_RETRY_DELAY_S``).
"""

from __future__ import annotations

import dataclasses
import errno
import re
from collections.abc import Iterator, Mapping
from datetime import timedelta
from typing import Any

from airflow.sdk.definitions.retry_policy import RetryDecision, RetryPolicy

# SQLSTATEs of a server that is going away, coming back or briefly refusing (failover,
# restart, connection limits), and of transactions that only lost a race.
TRANSIENT_SQLSTATES = frozenset(
    {
        "57P01",  # admin_shutdown (pg_terminate_backend, a fast shutdown)
        "57P02",  # crash_shutdown
        "57P03",  # cannot_connect_now (starting up, in recovery, promoting)
        "53300",  # too_many_connections
        "40001",  # serialization_failure
        "40P01",  # deadlock_detected
        "55P03",  # lock_not_available
    }
)
TRANSIENT_SQLSTATE_CLASSES = ("08",)  # connection exceptions (08001, 08006, …)
TRANSIENT_ERRNOS = frozenset(
    {
        errno.ECONNREFUSED,
        errno.ECONNRESET,
        errno.ECONNABORTED,
        errno.EPIPE,
        errno.ETIMEDOUT,
        errno.EHOSTUNREACH,
        errno.ENETUNREACH,
    }
)
TRANSIENT_GRPC = frozenset({"UNAVAILABLE"})  # the channel's server is down or restarting
# Spark Connect error conditions of a server that restarted under a client: the session or the
# operation the step held is gone with the old driver, so only a new session (the task's next
# try) can go on. The client's own retries ride out the restart and then end with one of these.
TRANSIENT_SPARK_CONDITIONS = frozenset(
    {
        "INVALID_HANDLE.SESSION_CHANGED",  # "the existing Spark server driver … has restarted"
        "INVALID_HANDLE.SESSION_NOT_FOUND",
        "INVALID_HANDLE.OPERATION_NOT_FOUND",
    }
)
# pyspark's wrapper for a session or operation lost after part of a result was received; the
# condition it reports is its ``error_type`` parameter.
SPARK_WRAPPED = "RESPONSE_ALREADY_RECEIVED"
SPARK_CONDITION_PREFIX = re.compile(r"\[([A-Z][A-Z0-9_]*(?:\.[A-Z][A-Z0-9_]*)*)\]")
MAX_CHAIN = 16

RETRIES = 3
RETRY_DELAY = timedelta(seconds=30)
RETRY_DELAY_ENV = "AUDITSYNC_RETRY_DELAY_S"
MAX_RETRY_DELAY = timedelta(minutes=10)


@dataclasses.dataclass(frozen=True)
class Verdict:
    transient: bool
    reason: str


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what caused it (``raise … from``, or raised while handling), once each."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(seen) < MAX_CHAIN:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _sqlstate(exc: BaseException) -> tuple[bool, str | None]:
    """(is a PostgreSQL driver error, its SQLSTATE) for psycopg 3 and psycopg2 errors."""
    module = type(exc).__module__.split(".")[0]
    if module not in ("psycopg", "psycopg2"):
        return False, None
    return True, getattr(exc, "sqlstate", None) or getattr(exc, "pgcode", None)


def _grpc_status(exc: BaseException) -> str | None:
    """The gRPC status name of a gRPC error or a Spark Connect client exception."""
    for getter in ("getGrpcStatusCode", "code"):
        method = getattr(exc, getter, None)
        if method is None or not callable(method):
            continue
        if getter == "code" and not type(exc).__module__.startswith("grpc"):
            continue
        try:
            status = method()
        except Exception:  # an RPC object that is not finished has no code
            continue
        name = getattr(status, "name", None)
        if isinstance(name, str):
            return name
    return None


def _spark_condition(exc: BaseException) -> str | None:
    """The Spark error condition of a pyspark error (``getCondition``; for
    ``RESPONSE_ALREADY_RECEIVED`` the condition it wraps), or of a gRPC error from a Spark
    Connect server (its details start with ``[CONDITION]``)."""
    get = getattr(exc, "getCondition", None)
    if callable(get) and type(exc).__module__.startswith("pyspark"):
        condition = get()
        if condition == SPARK_WRAPPED:
            params = getattr(exc, "getMessageParameters", lambda: None)() or {}
            return str(params.get("error_type") or condition)
        return condition if isinstance(condition, str) else None
    details = getattr(exc, "details", None)
    if callable(details) and type(exc).__module__.startswith("grpc"):
        try:
            match = SPARK_CONDITION_PREFIX.match(details() or "")
        except Exception:  # an RPC object that is not finished has no details
            return None
        return match.group(1) if match else None
    return None


def _one(exc: BaseException) -> str | None:
    """Why ``exc`` itself is transient, or None."""
    condition = _spark_condition(exc)
    if condition in TRANSIENT_SPARK_CONDITIONS:
        return f"Spark Connect {condition} (the server restarted)"
    is_pg, state = _sqlstate(exc)
    if is_pg:
        if state is None and type(exc).__name__ == "OperationalError":
            return "PostgreSQL connection failed (no SQLSTATE: the server was not reached)"
        if state in TRANSIENT_SQLSTATES or (state or "").startswith(TRANSIENT_SQLSTATE_CLASSES):
            return f"PostgreSQL SQLSTATE {state} ({type(exc).__name__})"
        return None
    status = _grpc_status(exc)
    if status is not None:
        return f"gRPC {status}" if status in TRANSIENT_GRPC else None
    if isinstance(exc, OSError) and exc.errno in TRANSIENT_ERRNOS:
        return f"{type(exc).__name__} errno {errno.errorcode.get(exc.errno or 0, exc.errno)}"
    if isinstance(exc, (ConnectionRefusedError, ConnectionResetError, ConnectionAbortedError)):
        return type(exc).__name__
    return None


def classify(exc: BaseException) -> Verdict:
    """Transient when ``exc`` or anything in its cause chain is a fault named above; a
    PostgreSQL or gRPC error with another code decides the chain as not transient."""
    for link in _chain(exc):
        if type(link).__name__ == "AirflowFailException":
            return Verdict(False, f"a verdict, not a fault: {link}")
        reason = _one(link)
        if reason is not None:
            return Verdict(True, reason)
    return Verdict(False, f"not a transient fault: {type(exc).__name__}: {exc}")


class TransientFaultPolicy(RetryPolicy):
    """Retry (with the task's exponential backoff) what :func:`classify` calls transient;
    fail everything else without using up the retries."""

    def evaluate(
        self, exception: BaseException, try_number: int, max_tries: int, context: Any = None
    ) -> RetryDecision:
        verdict = classify(exception)
        if verdict.transient:
            return RetryDecision.retry(reason=f"transient fault, retrying: {verdict.reason}")
        return RetryDecision.fail(reason=verdict.reason[:500])

    def serialize(self) -> dict[str, Any]:
        return {"__type": type(self).__name__}

    @classmethod
    def deserialize(cls, data: dict[str, Any]) -> TransientFaultPolicy:
        return cls()


RETRY_ARGS: dict[str, Any] = {
    "retries": RETRIES,
    "retry_delay": RETRY_DELAY,
    "retry_exponential_backoff": 2.0,
    "max_retry_delay": MAX_RETRY_DELAY,
    "retry_policy": TransientFaultPolicy(),
}


def retry_args(environ: Mapping[str, str]) -> dict[str, Any]:
    """:data:`RETRY_ARGS` with the delay before the first retry from ``AUDITSYNC_RETRY_DELAY_S``
    (seconds, default 30; each later retry waits twice as long, up to ``MAX_RETRY_DELAY``).
    A value that is not a number of seconds in [0, 600] is refused with its name and value:
    the DAG does not load, and Airflow shows why."""
    raw = environ.get(RETRY_DELAY_ENV, "").strip()
    if not raw:
        return dict(RETRY_ARGS)
    try:
        seconds = float(raw)
    except ValueError:
        raise ValueError(f"{RETRY_DELAY_ENV}: expected seconds, got {raw!r}") from None
    if not 0 <= seconds <= MAX_RETRY_DELAY.total_seconds():
        raise ValueError(
            f"{RETRY_DELAY_ENV}: must be between 0 and {MAX_RETRY_DELAY.total_seconds():g}, "
            f"got {raw!r}"
        )
    return {**RETRY_ARGS, "retry_delay": timedelta(seconds=seconds)}
