"""``AUDITSYNC_LOG_FORMAT=json``, the one setting: every line the ``auditsync`` commands, the
sink and the Spark jobs print parses as a JSON object (``watch_service.logs``), a step's under
``spark-submit`` too."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from spark_jobs.common import progress
from spark_jobs.common.session import submit_flags
from spark_jobs.warehouse.layout import step_package

from ..support import ROOT, free_port

BIN = Path(sys.executable).parent
JSON_ENV = {**os.environ, "AUDITSYNC_LOG_FORMAT": "json"}


def json_lines(text: str) -> list[dict]:
    """Every line as JSON (a line that is not fails the test, naming it)."""
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            pytest.fail(f"not a JSON line: {line!r}")
    return out


def auditsync(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "auditsync"), *args],
        env={**JSON_ENV, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.pg
def test_the_cli_prints_json_lines(pg_url):
    out = auditsync("migrate", DATABASE_URL=pg_url)
    assert out.returncode == 0, out.stderr
    [line] = json_lines(out.stdout)
    assert (line["level"], line["logger"], line["message"]) == (
        "INFO",
        "auditsync",
        "schema is up to date",
    )
    json_lines(out.stderr)  # anything it logged is JSON too

    down = f"postgresql://127.0.0.1:{free_port()}/nothing"
    out = auditsync("migrate", DATABASE_URL=down)
    assert out.returncode == 2 and out.stdout == ""
    [line] = json_lines(out.stderr)
    assert line["level"] == "ERROR"
    assert line["message"].startswith("auditsync: cannot reach PostgreSQL: ")

    out = auditsync("migrate", DATABASE_URL=pg_url, AUDITSYNC_LOG_FORMAT="xml")
    assert out.returncode == 2
    assert out.stderr == "auditsync: AUDITSYNC_LOG_FORMAT: expected text or json, got 'xml'\n"


@pytest.mark.unit
def test_the_sink_prints_json_lines(tmp_path):
    """A sink whose service is down says so in JSON lines until it is stopped; a bad flag is
    one JSON error line."""
    out = auditsync(
        "sink", "--url", "http://127.0.0.1:9", "--topics", "t", "--consumer", "c",
        "--landing", "gs://bars/landing", "--no-index",
    )  # fmt: skip
    assert out.returncode == 2
    [line] = json_lines(out.stderr)
    assert (line["level"], line["logger"]) == ("ERROR", "auditsync.sink")
    assert line["message"].startswith("auditsync sink: --landing: unsupported location")

    url = f"http://127.0.0.1:{free_port()}"
    proc = subprocess.Popen(
        [str(BIN / "auditsync"), "sink", "--url", url, "--topics", "t", "--consumer", "c",
         "--landing", str(tmp_path), "--no-index", "--backoff-cap-ms", "200"],
        env=JSON_ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stderr], daemon=True).start()
    seen: list[dict] = []
    try:
        deadline = time.monotonic() + 120  # a bound against a hang: starts in 1-10 s here
        while not any(f"topics t from {url}" in s["message"] for s in seen):
            seen += json_lines(lines.get(timeout=max(0.1, deadline - time.monotonic())))
    finally:
        proc.terminate()
        rest = proc.communicate(timeout=60)
    seen += json_lines(rest[0] + rest[1])
    assert f"sink c: topics t from {url}, resuming after frame 0" in {s["message"] for s in seen}
    assert all(set(s) >= {"ts", "level", "logger", "message"} for s in seen)


@pytest.mark.unit
def test_the_spark_jobs_print_json_lines(monkeypatch, capsys):
    out = auditsync("pipeline", "run", "--work", "gs://bars/wh", "--landing", "/tmp/x")
    assert out.returncode == 2 and out.stdout == ""
    [line] = json_lines(out.stderr)
    assert (line["level"], line["logger"]) == ("ERROR", "auditsync.pipeline")
    assert line["message"].startswith("[pipeline] unsupported location 'gs://bars/wh'")

    # what every step's main prints: its user's lines and its result line
    monkeypatch.setenv("AUDITSYNC_LOG_FORMAT", "json")
    progress.say("verify: signed audit log unsigned")
    figures = progress.emit("verify", 1.5, {"passed": True, "left": 0})
    said, result = json_lines(capsys.readouterr().out)
    assert said["message"] == "verify: signed audit log unsigned"
    assert (result["message"], result["result"]) == ("auditsync-result", figures)
    assert progress.parse([json.dumps(result, separators=(",", ":"))]) == figures
    monkeypatch.setenv("AUDITSYNC_LOG_FORMAT", "text")
    progress.emit("verify", 1.5, {"passed": True, "left": 0})
    [text] = capsys.readouterr().out.splitlines()
    assert text == 'auditsync-result {"left": 0, "passed": true, "seconds": 1.5, "step": "verify"}'
    assert progress.parse([text]) == figures


@pytest.mark.spark
def test_a_step_under_spark_submit_prints_json_lines(pg_url, tmp_path):
    """``spark-submit`` of a real step, the shortest: maintenance over a fresh warehouse (its
    catalog attached and its tables created, none written yet, so nothing to maintain). What
    the step prints on stdout is JSON lines, its result among them; the JVM's own log4j lines
    are Spark's, on stderr."""
    main = ROOT.joinpath(*step_package("maintenance").split("."), "main.py")
    env = {
        **JSON_ENV,
        "AUDITSYNC_DATABASE_URL": pg_url,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }
    env.pop("PYSPARK_SUBMIT_ARGS", None)  # the tests' in-process sessions' flags, not this one's
    out = subprocess.run(
        [str(BIN / "spark-submit"), "--master", "local[1]", *submit_flags(master="local[1]")]
        + [str(main), "--work", str(tmp_path / "warehouse")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    lines = json_lines(out.stdout)
    assert lines and all(set(line) >= {"ts", "level", "logger", "message"} for line in lines)
    assert {line["logger"] for line in lines} == {progress.LOGGER}
    figures = progress.parse(out.stdout.splitlines())
    assert figures is not None and figures.pop("seconds") >= 0
    assert figures == {
        "step": "maintenance",
        "files_before": 0,
        "files_after": 0,
        "snapshots_expired": 0,
        "orphans_removed": 0,
    }
