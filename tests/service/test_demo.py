"""``make demo``'s log half keeps working, run end to end against the session database (the
pipeline half, ``airflow dags test audit_sync``, is proven by tests/airflow)."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest

from tests.support import ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.pg]


async def test_demo_passes(pg_url, tmp_path):
    env = {**os.environ, "DATABASE_URL": pg_url, "AUDITSYNC_HOME": str(tmp_path)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "watch_service.tools.demo",
        "--log-only",
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    text = out.decode()
    assert proc.returncode == 0, text
    assert "demo passed in" in text
    assert "tombstone cap [1, 200]" in text
    assert "service pid" in text and "stopped" in text
    assert "embedded PostgreSQL stopped" not in text  # it used DATABASE_URL, started no cluster
