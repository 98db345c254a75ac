"""One Spark Connect session for all the Spark work of one DAG run.

A Spark Connect client that names no session gets a new one on the server, with a new catalog:
each task of a run then configured the warehouse's Iceberg catalog again (about ten settings
and two catalog queries), opened its JDBC connections to the catalog's PostgreSQL and loaded
every table's metadata afresh, and released it all when it ended. The run's tasks instead name
one session (``session_id`` in the ``sc://`` URL): ``start_run`` draws its id, every Spark task
joins it and leaves it open (``tables.attach`` finds the catalog already attached: a marker
setting of the session), and ``finish_run``, the teardown that runs whatever the outcome,
releases it. A session the teardown never released (a killed worker) ends on the server after
its idle timeout (``spark.connect.session.manager.defaultSessionTimeout``, 60 minutes).

Clearing a task re-runs ``start_run`` (its setup), which draws a new id: the server refuses a
released session's id for good. A server restarted mid-run creates the session again when the
retried task joins it, and ``tables.attach`` attaches the catalog again there.

Two tasks of a run may share the session at once (the two backfills). Each step sets only
runtime settings of its own (``plan_size``), put back when it ends; both steps of one run ask
for the same ones, so neither runs with the other's.
"""

from __future__ import annotations

import uuid
from typing import Any

CONN_ID = "spark_connect_default"  # the Spark Connect connection the pipeline's tasks use
# The XCom key under which ``start_run`` hands the run's session id to its tasks.
XCOM_KEY = "spark_connect_session"
# The DAG's template for it: '' before start_run drew one (each task then has its own session).
TEMPLATE = "{{ ti.xcom_pull(task_ids='start_run', key='" + XCOM_KEY + "') or '' }}"


def new_id() -> str:
    return str(uuid.uuid4())


def session_url(url: str, session_id: str | None) -> str:
    """``url`` (``sc://host:port[/;param=value…]``) naming session ``session_id`` (pure); as it
    is without one, or when the connection names its own session."""
    if not session_id:
        return url
    try:
        uuid.UUID(session_id)
    except ValueError:
        raise ValueError(f"Spark Connect session id {session_id!r}: a UUID is expected") from None
    head, _, params = url.partition(";")
    if any(p.split("=", 1)[0] == "session_id" for p in params.split(";")):
        return url
    base = head if head.endswith("/") else head + "/"
    return ";".join(x for x in (base, params, f"session_id={session_id}") if x)


def leave_open(spark: Any) -> None:
    """Make ``spark.stop()`` of a Spark Connect client close only its channel, leaving the
    session on the server to the run's next task."""
    spark.release_session_on_close = False


def release(url: str) -> None:
    """End the session ``url`` names on the server (best effort, as ``SparkSession.stop``)."""
    from pyspark.sql.connect.session import SparkSession

    SparkSession.builder.remote(url).create().stop()  # create: never another's session
