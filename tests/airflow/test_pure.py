"""The plugin's pure core and the Airflow environment, without Airflow running, a socket, a
database or a JVM."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from auditsync_plugin import step_args as jobs
from auditsync_plugin.hooks.watch_service import (
    Request,
    WatchServiceError,
    WatchServiceHook,
    base_url,
    error_message,
    parse_heads,
)
from auditsync_plugin.quality_summary import summarize
from auditsync_plugin.sink_cursors import (
    Lag,
    SinkPosition,
    decide,
    parse_state,
    split_consumers,
)
from auditsync_plugin.ui.app import doc_name, resolve_doc
from auditsync_plugin.ui.page import render_page
from auditsync_plugin.ui.runs import pivot
from watch_service.settings import Settings
from watch_service.tools.airflow_env import airflow_env, connection_json

pytestmark = pytest.mark.unit


# -- hook ------------------------------------------------------------------------------------
def test_requests_are_built_without_io():
    hook = WatchServiceHook(timeout_s=3.0)
    assert hook.topics_request("http://svc:8400/", "k3y") == Request(
        "GET",
        "http://svc:8400/v0/topics",
        {"Accept": "application/json", "Authorization": "Bearer k3y"},
        3.0,
    )
    assert "Authorization" not in hook.topics_request("http://svc:8400", None).headers


@pytest.mark.parametrize(
    ("schema", "host", "port", "url"),
    [
        (None, "watch", 8400, "http://watch:8400"),
        ("https", "watch.example", None, "https://watch.example"),
        ("", "http://10.0.0.5:8400/", None, "http://10.0.0.5:8400"),
    ],
)
def test_base_url_from_connection_fields(schema, host, port, url):
    assert base_url(schema, host, port) == url


def test_base_url_refuses_what_it_cannot_use():
    with pytest.raises(WatchServiceError, match="host is empty"):
        base_url("http", "", None)
    with pytest.raises(WatchServiceError, match="schema must be http or https"):
        base_url("ftp", "h", 1)


def test_heads_and_errors_parsed_from_the_service_answers():
    body = json.dumps(
        {
            "topics": [
                {"topic": "a", "head_seq": 7, "earliest_seq": 1},
                {"topic": "b", "head_seq": 0, "earliest_seq": 1},
            ]
        }
    )
    assert parse_heads(body) == {"a": 7, "b": 0}
    with pytest.raises(WatchServiceError, match="unexpected answer"):
        parse_heads(b'{"nope": 1}')
    assert (
        error_message(401, b'{"error":{"code":"unauthorized","message":"missing key"}}')
        == "401 unauthorized: missing key"
    )
    assert error_message(502, b"<html>bad gateway") == "502: <html>bad gateway"


# -- sensor decision ---------------------------------------------------------------------------
A = SinkPosition("c1", ("a", "b"), {"a": 10, "b": 4})


def test_not_ready_before_the_interval_ends():
    d = decide(now_s=100, interval_end_s=160, positions=[A], missing=[], heads={"a": 1})
    assert not d.ready and "ends in 60s" in d.reason


def test_ready_when_every_cursor_reached_the_heads():
    d = decide(200, 160, [A, SinkPosition("c2", ("a",), {"a": 12})], [], {"a": 10, "b": 4})
    assert d.ready and "c1, c2" in d.reason


def test_lagging_consumers_and_topics_are_named():
    d = decide(200, 160, [A], [], {"a": 15, "b": 4, "zz": 99})
    assert not d.ready
    assert d.lags == (Lag("c1", "a", 10, 15),)
    assert "c1/a cursor 10 < head 15 (5 behind)" in d.reason


def test_a_topic_the_service_no_longer_lists_is_not_waited_for():
    assert decide(200, 160, [A], [], {"a": 10}).ready


def test_missing_state_and_no_consumers_are_not_ready():
    assert "c9" in decide(200, 160, [A], ["c9"], {"a": 1}).reason
    assert "no sink consumer" in decide(200, 160, [], [], {}).reason
    assert not decide(200, 160, [A], [], None).ready


def test_cursors_of_topics_not_yet_in_the_state_count_as_zero():
    d = decide(200, 160, [SinkPosition("c1", ("a", "new"), {"a": 3})], [], {"a": 3, "new": 2})
    assert d.lags == (Lag("c1", "new", 0, 2),)


def test_state_payloads_and_consumer_lists_are_parsed():
    assert parse_state("x", b'{"cursors": {}}') == SinkPosition("x", (), {})
    assert split_consumers(" a, ,b ") == ["a", "b"] and split_consumers(None) == []


# -- GX summary --------------------------------------------------------------------------------
def _result(dataset, success, results, evaluated=None):
    ok = sum(1 for r in results if r["success"])
    return {
        "dataset": dataset,
        "success": success,
        "results": results,
        "statistics": {
            "evaluated_expectations": evaluated or len(results),
            "successful_expectations": ok,
        },
    }


def _item(success, type_, kwargs, result=None, error=None):
    return {
        "success": success,
        "expectation_config": {"type": type_, "kwargs": kwargs},
        "result": result or {},
        "exception_info": {"raised_exception": error is not None, "exception_message": error},
    }


def test_a_passing_checkpoint_summarises_in_one_line_plus_the_link():
    s = summarize(
        [
            _result(
                "audit_log",
                True,
                [_item(True, "expect_column_values_to_not_be_null", {"column": "seq"})],
            )
        ],
        "http://af/auditsync/docs/index.html",
    )
    assert s.success
    assert s.text() == (
        "data quality PASSED: 1 of 1 expectations met (audit_log 1/1)\n"
        "report: http://af/auditsync/docs/index.html"
    )


def test_failures_name_the_expectation_the_rows_and_examples():
    docs = [
        _result(
            "audit_log",
            False,
            [
                _item(
                    False,
                    "expect_compound_columns_to_be_unique",
                    {"column_list": ["topic", "seq"], "batch_id": "x"},
                    {
                        "element_count": 10,
                        "unexpected_count": 2,
                        "partial_unexpected_list": [{"topic": "t", "seq": 4}] * 2,
                    },
                ),
                _item(True, "expect_column_values_to_not_be_null", {"column": "ts"}),
            ],
        ),
        _result(
            "deliveries",
            False,
            [
                _item(
                    False,
                    "expect_column_values_to_not_be_null",
                    {
                        "column": "seq",
                        "row_condition": {
                            "column": {"name": "kind"},
                            "operator": "==",
                            "parameter": "record",
                        },
                    },
                    {"element_count": 5, "unexpected_count": 1, "partial_unexpected_list": [None]},
                ),
                _item(
                    False,
                    "expect_column_values_to_be_between",
                    {"column": "ts"},
                    error="column ts not found",
                ),
            ],
        ),
        _result(
            "remaining",
            False,
            [_item(False, "expect_table_row_count_to_equal", {"value": 0}, {"observed_value": 2})],
        ),
    ]
    s = summarize(docs, "DOCS")
    assert not s.success and s.evaluated == 5 and len(s.failed) == 4
    assert s.text().splitlines() == [
        "data quality FAILED: 1 of 5 expectations met (audit_log 1/2, deliveries 0/2, "
        "remaining 0/1)",
        "  - audit_log: expect_compound_columns_to_be_unique(column_list=['topic', 'seq']): "
        "2 of 10 rows unexpected, e.g. {'topic': 't', 'seq': 4}, {'topic': 't', 'seq': 4}",
        "  - deliveries: expect_column_values_to_not_be_null(column='seq', where kind == "
        "'record'): 1 of 5 rows unexpected, e.g. None",
        "  - deliveries: expect_column_values_to_be_between(column='ts') raised: "
        "column ts not found",
        "  - remaining: expect_table_row_count_to_equal(value=0): observed 2",
        "report: DOCS",
    ]


def test_no_results_is_not_a_pass():
    assert not summarize([], "x").success


# -- UI ----------------------------------------------------------------------------------------
DEFECTS = ("silent_gap", "mismatch", "phantom")
REPAIRABLE = ("silent_gap", "mismatch")
ROWS = [
    {
        "run_id": "r1",
        "run_status": "failed",
        "finished_at": "2025-06-01 12:00:03.5+00",
        "consumer": "c1",
        "topic": "a",
        "status": s,
        "count": n,
        "remaining": left,
    }
    for s, n, left in [
        ("delivered", 90, None),
        ("duplicate", 3, None),
        ("tombstoned", 5, None),
        ("silent_gap", 4, 0),
        ("mismatch", 1, 0),
        ("phantom", 1, 1),
    ]
]


def test_runs_pivot_to_one_line_per_topic():
    [line] = pivot(ROWS, REPAIRABLE, DEFECTS)
    assert (
        line.delivered,
        line.duplicates,
        line.tombstoned,
        line.silent_gaps,
        line.backfilled,
        line.defects_left,
    ) == (90, 3, 5, 4, 5, 1)
    assert line.finished_at == "2025-06-01 12:00:03"


def test_a_rewound_source_carries_its_ranges():
    rewound = {
        **ROWS[0],
        "status": "source_rewound",
        "count": 101,
        "rewound": [[201, 300], [305, 305]],
    }
    [line] = pivot([*ROWS, rewound], REPAIRABLE, DEFECTS)
    assert (line.rewound, line.rewound_ranges) == (101, [(201, 300), (305, 305)])
    assert (line.delivered, line.defects_left) == (90, 1)


def test_without_a_verify_result_every_defect_found_is_left():
    rows = [{**r, "remaining": None} for r in ROWS]
    [line] = pivot(rows, REPAIRABLE, DEFECTS)
    assert (line.backfilled, line.defects_left) == (0, 6)


def test_the_page_escapes_and_flags_defects():
    lines = pivot([{**ROWS[5], "topic": "<b>x</b>"}], REPAIRABLE, DEFECTS)
    page = render_page(lines, docs_available=True)
    assert "&lt;b&gt;x&lt;/b&gt;" in page and "<b>x</b>" not in page
    assert '<td class="bad">1</td>' in page and 'href="docs/index.html"' in page
    empty = render_page([], docs_available=False, error="db <down>")
    assert "no reconciliation runs yet" in empty and "db &lt;down&gt;" in empty
    assert "no Data Docs yet" in empty


def test_data_docs_paths_cannot_leave_the_docs_folder(tmp_path: Path):
    docs = tmp_path / "site"
    (docs / "static").mkdir(parents=True)
    (docs / "index.html").write_text("i")
    (docs / "static" / "a.css").write_text("c")
    (tmp_path / "secret.txt").write_text("s")
    assert resolve_doc(docs, "") == (docs / "index.html").resolve()
    assert resolve_doc(docs, "static/a.css") == (docs / "static" / "a.css").resolve()
    assert resolve_doc(docs, "../secret.txt") is None
    assert resolve_doc(docs, "static") is None
    assert resolve_doc(docs, "missing.html") is None


def test_data_docs_names_in_the_store_cannot_leave_the_site():
    assert doc_name("") == "index.html"
    assert doc_name("validations/audit_log/r/t/b.html") == "validations/audit_log/r/t/b.html"
    for bad in ("../secret", "a/../../b", "/etc/passwd", "a//b", "./index.html"):
        assert doc_name(bad) is None, bad


# -- jobs --------------------------------------------------------------------------------------
def test_job_arguments_are_the_pipeline_runners():
    paths = jobs.Paths("/l", "/w", "R")
    assert jobs.application(Path("/p"), "verify") == "/p/spark_jobs/steps/verify/main.py"
    # The roots pass through as given (the step parses them; a template is rendered first).
    assert jobs.args("compact", paths) == ["--work", "/w", "--run-id", "R", "--landing", "/l"]
    assert jobs.args("verify", paths) == ["--work", "/w", "--run-id", "R"]
    s3 = jobs.Paths("s3://bucket/landing", "s3://bucket/wh", "R")
    assert jobs.args("compact", s3)[:2] == ["--work", "s3://bucket/wh"]
    assert jobs.args("backfill", paths, target="search_index")[-2:] == ["--target", "search_index"]
    with pytest.raises(ValueError, match="--target is for backfill"):
        jobs.args("backfill", paths, target="both")
    with pytest.raises(ValueError, match="unknown Spark job"):
        jobs.application(Path("/p"), "nope")
    # The database URL is never an argument: it travels in the environment.
    assert not any(
        "database" in a
        for step in ("compact", "reconcile", "backfill", "verify")
        for a in jobs.args(step, paths)
    )


def test_templated_roots_survive_path_building():
    paths = jobs.Paths("{{ var.value.l }}", "{{ var.value.w }}", "{{ ds }}")
    assert jobs.args("reconcile", paths)[:4] == [
        "--work",
        "{{ var.value.w }}",
        "--run-id",
        "{{ ds }}",
    ]


def test_publish_refuses_a_run_that_did_not_pass():
    from airflow.sdk.exceptions import AirflowFailException

    from auditsync_plugin.operators.pipeline import published_extra

    extra = published_extra("R", ("passed", 3, 0, {"compact": {"seconds": 1.5, "rows": 9}}))
    assert extra == {
        "run_id": "R",
        "status": "passed",
        "defects_found": 3,
        "defects_remaining": 0,
        "counts": {"compact": {"rows": 9}},
    }
    with pytest.raises(AirflowFailException, match="is 'failed', not passed"):
        published_extra("R", ("failed", 1, 1, {}))
    with pytest.raises(AirflowFailException, match="not in pipeline_runs"):
        published_extra("R", None)


# -- airflow_env -------------------------------------------------------------------------------
def test_airflow_env_for_the_embedded_defaults(tmp_path: Path):
    env = airflow_env(
        Settings(local_dir=tmp_path, pg_port=5555),
        {},
        project_root=Path("/proj"),
        python="/venv/bin/python",
    )
    assert env["AIRFLOW_HOME"] == str(tmp_path / "airflow")
    assert env["AIRFLOW__CORE__DAGS_FOLDER"] == "/proj/dags"
    assert env["AIRFLOW__CORE__PLUGINS_FOLDER"] == str(tmp_path / "airflow" / "plugins")
    assert env["AIRFLOW__CORE__LOAD_EXAMPLES"] == "False"
    assert env["AIRFLOW__CORE__PARALLELISM"] == "2"
    assert env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"] == "admin:admin"
    assert json.loads(env["AIRFLOW_CONN_SPARK_DEFAULT"]) == {
        "conn_type": "spark",
        "host": "local[*]",
    }
    assert json.loads(env["AIRFLOW_CONN_AUDITSYNC_WATCH"]) == {
        "conn_type": "http",
        "host": "127.0.0.1",
        "port": 8400,
        "schema": "http",
    }
    assert json.loads(env["AIRFLOW_CONN_AUDITSYNC_PG"]) == {
        "conn_type": "postgres",
        "host": "127.0.0.1",
        "port": 5555,
        "login": "postgres",
        "schema": "auditsync",
    }
    assert env["AUDITSYNC_SPARK_SUBMIT"] == "/venv/bin/spark-submit"
    assert env["PYSPARK_PYTHON"] == env["PYSPARK_DRIVER_PYTHON"] == "/venv/bin/python"
    assert env["AIRFLOW_VAR_AUDITSYNC_LANDING"] == str(tmp_path / "landing")
    assert "AUDITSYNC_SCHEDULE" not in env


def test_airflow_env_overrides(tmp_path: Path):
    settings = Settings(local_dir=tmp_path, database_url="postgresql://u:p%40ss@db:6432/x")
    env = airflow_env(
        settings,
        {
            "AUDITSYNC_SPARK_MASTER": "spark://m:7077",
            "AUDITSYNC_WATCH_URL": "https://w:9",
            "AUDITSYNC_SINK_KEY": "sekret",
            "AUDITSYNC_SCHEDULE": "0 * * * *",
            "AUDITSYNC_CONSUMERS": "c1,c2",
            "AUDITSYNC_AWS_CONN_ID": "s3_landing",
            "HOME": "/ignored",
            "AUDITSYNC_LANDING": "",
        },
    )
    assert json.loads(env["AIRFLOW_CONN_SPARK_DEFAULT"])["host"] == "spark://m:7077"
    assert json.loads(env["AIRFLOW_CONN_AUDITSYNC_WATCH"]) == {
        "conn_type": "http",
        "host": "w",
        "port": 9,
        "schema": "https",
        "password": "sekret",
    }
    assert json.loads(env["AIRFLOW_CONN_AUDITSYNC_PG"]) == {
        "conn_type": "postgres",
        "host": "db",
        "port": 6432,
        "login": "u",
        "password": "p@ss",
        "schema": "x",
    }
    assert env["AUDITSYNC_SCHEDULE"] == "0 * * * *"
    assert env["AIRFLOW_VAR_AUDITSYNC_CONSUMERS"] == "c1,c2"
    assert env["AIRFLOW_VAR_AUDITSYNC_LANDING"] == str(tmp_path / "landing")
    assert env["AUDITSYNC_AWS_CONN_ID"] == "s3_landing"
    assert "HOME" not in env


def test_connection_json_refuses_a_url_without_host():
    with pytest.raises(ValueError, match="expected scheme://host"):
        connection_json("local[*]", "spark")


# -- Spark Connect ---------------------------------------------------------------------------
def test_the_spark_connect_server_command(tmp_path: Path, monkeypatch):
    from watch_service.tools.spark_connect import SERVER_CLASS, command

    jar = tmp_path / "pg.jar"
    jar.write_bytes(b"PK")
    monkeypatch.setenv("AUDITSYNC_JDBC_JAR", str(jar))
    cmd = command(15099, "local[2]", python="/venv/bin/python")
    assert cmd[:3] == ["/venv/bin/spark-submit", "--class", SERVER_CLASS]
    assert cmd[-1] == "spark-internal"
    flags = dict(zip(cmd[1:-1:2], cmd[2:-1:2]))
    # A local master's executors share the driver's JVM: the jars go on its class path, not
    # shipped (copied into a folder of the server's own); a cluster's executors are sent them.
    assert flags["--master"] == "local[2]" and "--jars" not in flags
    path = flags["--driver-class-path"].split(":")
    assert path[-1] == str(jar) and any(
        p.endswith("/iceberg-spark-runtime-4.1_2.13-1.11.0.jar") for p in path
    )
    cluster = command(15099, "spark://h:7077", python="/venv/bin/python")
    flags = dict(zip(cluster[1:-1:2], cluster[2:-1:2]))
    assert "--driver-class-path" not in flags and flags["--jars"].split(",") == path
    confs = {c.split("=", 1)[0]: c.split("=", 1)[1] for c in cmd if c.startswith("spark.")}
    assert confs["spark.connect.grpc.binding.port"] == "15099"
    assert confs["spark.connect.grpc.binding.address"] == "127.0.0.1"  # loopback by default
    assert confs["spark.sql.session.timeZone"] == "UTC"
    # One shuffle partition per local core; a long-lived server keeps the tiered JIT.
    assert confs["spark.sql.shuffle.partitions"] == "2"
    assert "spark.driver.extraJavaOptions" not in confs


def test_airflow_env_names_the_spark_connect_server(tmp_path: Path):
    env = airflow_env(Settings(local_dir=tmp_path), {"AUDITSYNC_SPARK_CONNECT": "sc://h:15002"})
    assert json.loads(env["AIRFLOW_CONN_SPARK_CONNECT_DEFAULT"]) == {
        "conn_type": "spark_connect",
        "host": "h",
        "port": 15002,
    }
    assert "AIRFLOW_CONN_SPARK_CONNECT_DEFAULT" not in airflow_env(Settings(local_dir=tmp_path), {})


SESSION = "0b4f3c0e-9a55-4c4e-8d3c-6a6f0e0c1d2e"


@pytest.mark.parametrize(
    "url, joined",
    [
        ("sc://127.0.0.1:15002/", f"sc://127.0.0.1:15002/;session_id={SESSION}"),
        ("sc://127.0.0.1:15002", f"sc://127.0.0.1:15002/;session_id={SESSION}"),
        ("sc://h:1/;token=t;use_ssl=true", f"sc://h:1/;token=t;use_ssl=true;session_id={SESSION}"),
        # a connection that names its own session keeps it
        ("sc://h:1/;session_id=x", "sc://h:1/;session_id=x"),
    ],
)
def test_a_run_s_tasks_join_its_spark_connect_session_by_url(url, joined):
    from auditsync_plugin.connect_session import session_url

    assert session_url(url, SESSION) == joined
    assert session_url(url, "") == url  # before start_run drew one: the task's own session


def test_a_session_id_that_is_no_uuid_is_refused_by_name():
    from auditsync_plugin.connect_session import session_url

    with pytest.raises(ValueError, match="Spark Connect session id 'nope': a UUID is expected"):
        session_url("sc://h:1/", "nope")
