"""``auditsync sink --landing``: what it accepts and what it refuses, as a user sees it: an
unsupported or malformed location is one line on stderr and exit 2, before anything is
created; a consumer another sink holds on the object store is refused the same way."""

import subprocess
import sys

import pytest

from watch_service.sink.command import main
from watch_service.sink.landing import Landing

from ..support import ON_S3, ROOT

pytestmark = pytest.mark.pg

FLAGS = ["--url", "http://127.0.0.1:9", "--topics", "a", "--consumer", "c1", "--no-index"]


@pytest.mark.parametrize(
    "landing, message",
    [
        ("gs://bars/landing", "--landing: unsupported location 'gs://bars/landing': use a local"),
        ("abfss://c@acct.dfs.core.windows.net/x", "--landing: unsupported location 'abfss://"),
        ("s3:/bars/landing", "--landing: unsupported location 's3:/bars/landing': use a local"),
        ("S3://Bad_Bucket/x", "--landing: location 'S3://Bad_Bucket/x': 'Bad_Bucket' is not a"),
    ],
)
def test_an_unusable_landing_is_one_line_and_exit_2_with_nothing_created(
    landing, message, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    assert main([*FLAGS, "--landing", landing], environ={}) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"auditsync sink: {message}") and err.count("\n") == 1, err
    assert list(tmp_path.iterdir()) == []  # no folder named "s3:" or "gs:"


def test_the_command_exits_2_in_one_line(tmp_path):
    """The same through the real entry point, in its own process."""
    done = subprocess.run(
        [sys.executable, "-m", "watch_service.sink", *FLAGS, "--landing", "s3:/bars/landing"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (
        "auditsync sink: --landing: unsupported location 's3:/bars/landing': use a local path, "
        "file:///absolute/path or s3://bucket/prefix (supported schemes: file, s3)\n"
    )
    assert list(tmp_path.iterdir()) == []


@ON_S3
def test_a_second_sink_on_an_s3_consumer_is_refused(landing_location, pg_url, capsys):
    first = Landing(landing_location, "c1", pg_url)
    first.open()
    try:
        flags = [*FLAGS, "--landing", landing_location.uri(), "--database-url", pg_url]
        assert main(flags, environ=landing_location.s3.environ()) == 2
    finally:
        first.close()
    assert capsys.readouterr().err == (
        f"auditsync sink: {landing_location.uri('c1')}: another sink holds this consumer's lock "
        "(a PostgreSQL advisory lock, still held after 2s)\n"
    )
