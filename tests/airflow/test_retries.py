"""Retries for faults, never for findings: the classifier on real exceptions raised by real
parts (psycopg and psycopg2 against a closed port and a terminated backend, a Spark Connect
client against a closed port, the errors a Spark Connect server that restarted under a session
answers, a refused socket), and the rule that a gate's verdict is never retried. The retry
policy in a real task runner is exercised by ``test_operations.py`` and, for a Spark Connect
server killed during a step, by ``test_live_schedule.py`` (branch live-airflow)."""

from __future__ import annotations

import socket
import warnings
from datetime import timedelta

import psycopg
import psycopg2
import pytest
from airflow.sdk.definitions.retry_policy import RetryAction
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from auditsync_plugin.retries import RETRY_ARGS, TransientFaultPolicy, classify, retry_args
from spark_jobs.common.session import connect_retry_policy

from ..support import free_port

pytestmark = pytest.mark.unit


def raised(fn) -> BaseException:
    try:
        fn()
    except BaseException as exc:  # the exception a real part raised
        return exc
    raise AssertionError(f"{fn} raised nothing")


def closed_port() -> int:
    return free_port()  # bound and released: nothing listens there


def test_a_refused_postgres_connection_is_transient():
    port = closed_port()
    for exc in (
        raised(lambda: psycopg.connect(f"postgresql://x@127.0.0.1:{port}/db", connect_timeout=2)),
        raised(lambda: psycopg2.connect(f"postgresql://x@127.0.0.1:{port}/db", connect_timeout=2)),
    ):
        assert type(exc).__name__ == "OperationalError"
        verdict = classify(exc)
        assert verdict.transient, verdict
        assert "no SQLSTATE" in verdict.reason


@pytest.mark.pg
def test_a_terminated_backend_is_transient_and_sql_errors_are_not(pg_url):
    """A failover or restart ends sessions with 57P01 (admin_shutdown); what the SQL itself
    got wrong fails at once."""
    with psycopg.connect(pg_url, autocommit=True) as admin, psycopg.connect(pg_url) as victim:
        pid = victim.info.backend_pid
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        exc = raised(lambda: victim.execute("SELECT 1"))
    assert isinstance(exc, psycopg.errors.AdminShutdown) and exc.sqlstate == "57P01"
    assert classify(exc).transient
    assert "57P01" in classify(exc).reason
    with psycopg.connect(pg_url) as conn:
        syntax = raised(lambda: conn.execute("SELEC 1"))
    assert isinstance(syntax, psycopg.errors.SyntaxError)
    assert classify(syntax).transient is False
    # Wrapped by our code (`raise … from`), the cause still decides.
    outer = RuntimeError("reconcile: cannot read the progress")
    outer.__cause__ = exc
    assert classify(outer).transient


def test_a_spark_connect_server_that_is_down_is_transient():
    from pyspark.errors.exceptions.connect import SparkConnectGrpcException
    from pyspark.sql.connect.client import SparkConnectClient

    # One client retry instead of the default ten minutes of them.
    client = SparkConnectClient(
        f"sc://127.0.0.1:{closed_port()}", retry_policy={"max_retries": 1, "initial_backoff": 10}
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # RETRIES_EXCEEDED
        exc = raised(lambda: client.get_configs("spark.app.name"))
    client.close()
    assert isinstance(exc, SparkConnectGrpcException)
    verdict = classify(exc)
    assert verdict == type(verdict)(True, "gRPC UNAVAILABLE")


def test_a_step_meets_a_restarted_spark_connect_server_within_ten_seconds():
    """The steps' Spark Connect clients wait at most 10 s between tries (pyspark's default
    grows to a minute), and their tries still span an outage of about five minutes."""
    policy = connect_retry_policy()
    waits = [
        min(policy.initial_backoff * policy.backoff_multiplier**n, policy.max_backoff) / 1000
        for n in range(policy.max_retries)
    ]
    assert max(waits) == 10
    assert 280 < sum(waits) < 320


SESSION_CHANGED = (
    "[INVALID_HANDLE.SESSION_CHANGED] The handle 0e5f is invalid. The existing Spark server "
    "driver instance has restarted. Please reconnect. SQLSTATE: HY000"
)


def grpc_error(details: str, code: str = "INTERNAL") -> BaseException:
    """What a gRPC channel raises when its server aborts a call with ``code`` and ``details``
    (a real in-process gRPC server standing in for the Spark Connect server's answer)."""
    from concurrent import futures

    import grpc

    def fail(request: bytes, context: grpc.ServicerContext) -> bytes:
        context.abort(getattr(grpc.StatusCode, code), details)

    class Handler(grpc.GenericRpcHandler):
        def service(self, call_details):
            return grpc.unary_unary_rpc_method_handler(fail)

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    server.add_generic_rpc_handlers((Handler(),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.unary_unary("/spark.connect.SparkConnectService/ExecutePlan")
            return raised(lambda: call(b"", timeout=10))
    finally:
        server.stop(None)


def test_a_spark_connect_server_that_restarted_under_a_step_is_transient():
    """The client's own retries ride out a restart (``UNAVAILABLE``) and then meet a server
    without the step's session: pyspark raises one of three shapes, each a fault only a new
    session (the task's next try) gets past. Other Spark errors stay findings or bugs."""
    import grpc
    from google.rpc.error_details_pb2 import ErrorInfo
    from pyspark.errors import PySparkRuntimeError
    from pyspark.errors.exceptions.connect import SparkConnectException, convert_exception

    restarted = "Spark Connect INVALID_HANDLE.SESSION_NOT_FOUND (the server restarted)"
    # Part of a result had arrived when the operation vanished (pyspark's reattach.py).
    lost = PySparkRuntimeError(
        errorClass="RESPONSE_ALREADY_RECEIVED",
        messageParameters={"error_type": "INVALID_HANDLE.SESSION_NOT_FOUND"},
    )
    assert classify(lost) == type(classify(lost))(True, restarted)
    # The server's answer as the client converts it.
    changed = convert_exception(
        ErrorInfo(metadata={"errorClass": "INVALID_HANDLE.SESSION_CHANGED"}),
        SESSION_CHANGED,
        None,
        False,
        grpc.StatusCode.INTERNAL,
    )
    assert classify(changed).reason == (
        "Spark Connect INVALID_HANDLE.SESSION_CHANGED (the server restarted)"
    )
    # The client closes its session on that answer, so fetching the error's details raises
    # NO_ACTIVE_SESSION while handling the raw gRPC error: the cause decides.
    raw = grpc_error(SESSION_CHANGED)

    def fetch_details_after_the_session_closed() -> None:
        try:
            raise raw
        except grpc.RpcError:
            raise SparkConnectException(errorClass="NO_ACTIVE_SESSION", messageParameters={})  # noqa: B904

    wrapped = raised(fetch_details_after_the_session_closed)
    assert wrapped.__context__ is raw and classify(wrapped).transient, classify(wrapped)
    for condition in ("TABLE_OR_VIEW_NOT_FOUND", "NO_ACTIVE_SESSION"):
        other = convert_exception(
            ErrorInfo(metadata={"errorClass": condition}),
            f"[{condition}] nope",
            None,
            False,
            grpc.StatusCode.INTERNAL,
        )
        assert classify(other).transient is False, condition
    assert classify(grpc_error("[TABLE_OR_VIEW_NOT_FOUND] no table t")).transient is False


def test_a_refused_socket_is_transient_and_a_bug_is_not():
    port = closed_port()
    exc = raised(lambda: socket.create_connection(("127.0.0.1", port), timeout=2))
    assert isinstance(exc, ConnectionRefusedError)
    assert classify(exc).transient and "ECONNREFUSED" in classify(exc).reason
    assert classify(raised(lambda: {}["missing"])).transient is False


def test_a_verdict_is_never_retried_a_fault_inside_verify_is():
    policy = TransientFaultPolicy()
    verdict = AirflowFailException("verify: defects remain after backfill")
    assert policy.evaluate(verdict, 1, 4).action is RetryAction.FAIL
    # spark-submit's failure (the job exited 1) cannot be told from a finding: not retried.
    submit = AirflowException("Cannot execute: spark-submit … Error code is: 1.")
    assert policy.evaluate(submit, 1, 4).action is RetryAction.FAIL
    port = closed_port()
    fault = raised(lambda: psycopg.connect(f"postgresql://x@127.0.0.1:{port}/db"))
    decision = policy.evaluate(fault, 1, 4)
    assert decision.action is RetryAction.RETRY and decision.retry_delay is None  # backoff
    assert RETRY_ARGS["retries"] == 3 and RETRY_ARGS["retry_exponential_backoff"] == 2.0
    assert RETRY_ARGS["retry_delay"] == timedelta(seconds=30)
    assert RETRY_ARGS["max_retry_delay"] == timedelta(minutes=10)


def test_the_first_retry_delay_is_an_operators_setting():
    assert retry_args({}) == RETRY_ARGS
    assert retry_args({"AUDITSYNC_RETRY_DELAY_S": " "}) == RETRY_ARGS
    assert retry_args({"AUDITSYNC_RETRY_DELAY_S": "2.5"}) == {
        **RETRY_ARGS,
        "retry_delay": timedelta(seconds=2.5),
    }
    assert retry_args({"AUDITSYNC_RETRY_DELAY_S": "0"})["retry_delay"] == timedelta(0)
    for bad, why in (
        ("soon", "expected seconds, got 'soon'"),
        ("-1", "must be between 0 and 600, got '-1'"),
        ("601", "must be between 0 and 600, got '601'"),
        ("nan", "must be between 0 and 600, got 'nan'"),
    ):
        with pytest.raises(ValueError) as err:
            retry_args({"AUDITSYNC_RETRY_DELAY_S": bad})
        assert str(err.value) == f"AUDITSYNC_RETRY_DELAY_S: {why}"
