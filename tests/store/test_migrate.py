"""Migrations: applied once each and recorded, idempotent, safe when two processes migrate at
once, and refused (library and CLI) on a server with ``track_commit_timestamp`` off."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path

import psycopg
import pytest

from tests.support import free_port, unique
from tests.support import run_cli as support_run_cli
from watch_service.store.cluster import EmbeddedPostgres
from watch_service.store.migrate import MigrationError, available, latest_version, migrate

COMMIT_TS_OFF = (
    "track_commit_timestamp is off on this PostgreSQL server; auditsync needs it "
    "(commit timestamps back the Permify/SpiceDB watch). Fix: ALTER SYSTEM SET "
    "track_commit_timestamp = on; then restart the server."
)


@pytest.fixture
def fresh_db(pg_cluster) -> str:
    """An empty database in the session cluster, dropped afterwards."""
    name = unique("mig").replace("-", "_")
    admin = pg_cluster.url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield pg_cluster.url.rsplit("/", 1)[0] + "/" + name
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


@pytest.fixture(scope="module")
def commit_ts_off():
    """A throwaway cluster restarted with track_commit_timestamp = off."""
    base = Path(tempfile.mkdtemp(prefix="auditsync-test-commit-ts-off-"))
    pg = EmbeddedPostgres(base, free_port())
    pg.start()
    try:
        with psycopg.connect(pg.url, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET track_commit_timestamp = off")
        pg.stop()
        pg.start()
        with psycopg.connect(pg.url) as conn:
            assert conn.execute("SHOW track_commit_timestamp").fetchone() == ("off",)
        yield pg.url
    finally:
        pg.destroy()
        shutil.rmtree(base, ignore_errors=True)


def expected_names() -> list[str]:
    return [f"{v:03d}_{n}" for v, n, _ in available()]


def recorded(url: str) -> list[tuple[int, str]]:
    with psycopg.connect(url) as conn:
        return conn.execute(
            "SELECT version, name FROM schema_migrations ORDER BY version"
        ).fetchall()


@pytest.mark.unit
def test_available_migrations_are_numbered_in_order():
    found = available()
    versions = [v for v, _, _ in found]
    assert versions == sorted(set(versions))
    assert versions[:2] == [1, 2]
    assert latest_version() == versions[-1]
    assert all(sql.strip() for _, _, sql in found)


@pytest.mark.pg
def test_migrate_applies_each_file_once_and_records_it(fresh_db):
    assert migrate(fresh_db) == expected_names()
    assert recorded(fresh_db) == [(v, n) for v, n, _ in available()]
    assert migrate(fresh_db) == []  # idempotent: nothing left to apply
    assert recorded(fresh_db) == [(v, n) for v, n, _ in available()]
    with psycopg.connect(fresh_db) as conn:
        tables = {
            t
            for (t,) in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        }
    assert {"schema_migrations", "topics", "records", "gaps"} <= tables


@pytest.mark.pg
def test_session_database_is_up_to_date(pg_url):
    assert migrate(pg_url) == []
    assert [v for v, _ in recorded(pg_url)] == [v for v, _, _ in available()]


@pytest.mark.pg
async def test_two_migrations_at_once_apply_each_file_once(fresh_db):
    results = await asyncio.gather(
        asyncio.to_thread(migrate, fresh_db), asyncio.to_thread(migrate, fresh_db)
    )
    assert sorted(results, key=len) == [[], expected_names()]
    assert len(recorded(fresh_db)) == len(available())


async def run_cli(*argv: str, url: str) -> tuple[int, str, str]:
    return await support_run_cli(*argv, env={"DATABASE_URL": url})


@pytest.mark.pg
@pytest.mark.e2e
async def test_migrate_cli(fresh_db):
    code, out, err = await run_cli("migrate", url=fresh_db)
    assert code == 0, err
    assert out.splitlines() == [f"applied {n}" for n in expected_names()]
    code, out, err = await run_cli("migrate", url=fresh_db)
    assert (code, out) == (0, "schema is up to date\n")


@pytest.mark.pg
def test_migrate_refuses_commit_ts_off(commit_ts_off):
    with pytest.raises(MigrationError) as info:
        migrate(commit_ts_off)
    assert str(info.value) == COMMIT_TS_OFF
    with psycopg.connect(commit_ts_off) as conn:  # refused before touching anything
        assert conn.execute("SELECT to_regclass('schema_migrations')").fetchone() == (None,)


@pytest.mark.pg
@pytest.mark.e2e
async def test_migrate_cli_refuses_commit_ts_off(commit_ts_off):
    code, out, err = await run_cli("migrate", url=commit_ts_off)
    assert (code, out) == (2, "")
    assert err.strip().splitlines()[-1] == f"auditsync: {COMMIT_TS_OFF}"


@pytest.mark.e2e
async def test_migrate_cli_unreachable_server():
    code, _out, err = await run_cli(
        "migrate", url=f"postgresql://postgres@127.0.0.1:{free_port()}/x?connect_timeout=2"
    )
    assert code == 2
    assert err.startswith("auditsync: cannot reach PostgreSQL: ")
