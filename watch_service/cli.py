"""The ``auditsync`` command: parse flags, build Settings once, call one function."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

import psycopg

from watch_service import settings as settings_mod
from watch_service.settings import Settings, SettingsError
from watch_service.store.cluster import EmbeddedPgError
from watch_service.store.database import database_url, embedded_cluster, ensure_database
from watch_service.store.migrate import MigrationError, migrate
from watch_service.web.auth import KeyFileError

log = logging.getLogger("auditsync")


def _db(args, settings: Settings) -> int:
    cluster = embedded_cluster(settings)
    if args.action == "url":
        print(database_url(settings))
        return 0
    if settings.database_url and args.action in ("start", "stop"):
        print(
            f"DATABASE_URL is set; the embedded cluster is not used (db {args.action} ignored)",
            file=sys.stderr,
        )
        return 0
    if args.action == "start":
        print(cluster.start())
    elif args.action == "stop":
        print("stopped" if cluster.stop() else "not running")
    elif args.action == "status":
        print(
            cluster.status() if not settings.database_url else f"external: {settings.database_url}"
        )
    return 0


def _migrate(args, settings: Settings) -> int:
    url = database_url(settings)
    applied = migrate(url)
    print("\n".join(f"applied {n}" for n in applied) or "schema is up to date")
    return 0


def _serve(args, settings: Settings) -> int:
    import uvloop

    from watch_service.app import create_app
    from watch_service.web.serving import serve

    url = ensure_database(settings) if not args.no_migrate else database_url(settings)
    if settings.grpc_port is not None:
        log.info("SpiceDB-compatible gRPC on %s:%d", settings.host, settings.grpc_port)
    app = create_app(settings, url)
    log.info("serving on http://%s:%d", settings.host, settings.port)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(serve(app, settings))
    return 0


def _retention(args, settings: Settings) -> int:
    from psycopg_pool import AsyncConnectionPool

    from watch_service.store.retention import run_retention

    async def once() -> list:
        async with AsyncConnectionPool(
            database_url(settings), min_size=1, max_size=1, kwargs={"autocommit": True}, open=False
        ) as pool:
            return await run_retention(pool)

    written = asyncio.run(once())
    for topic, gap in written:
        print(f"{topic}: trimmed [{gap.gap_from}, {gap.gap_to}] ({gap.reason})")
    print(f"retention: {len(written)} gap(s) written")
    return 0


_DELEGATED = (
    ("watch", "watch_service.sink.watch_command", "watch topics and print frames"),
    ("sink", "watch_service.sink", "keep the landing zone and search index in sync"),
    ("pipeline", "spark_jobs.runner", "run compact → reconcile → backfill → verify"),
    (
        "spark-connect",
        "watch_service.tools.spark_connect",
        "the long-running Spark Connect server the pipeline's steps use",
    ),
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="auditsync", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    db = sub.add_parser("db", help="the embedded PostgreSQL cluster")
    db.add_argument("action", choices=["start", "stop", "status", "url"])
    db.set_defaults(func=_db)

    mig = sub.add_parser("migrate", help="apply pending schema migrations")
    mig.set_defaults(func=_migrate)

    serve = sub.add_parser("serve", help="run the watch service")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument(
        "--no-migrate",
        action="store_true",
        help="do not start the embedded cluster or migrate before serving",
    )
    serve.add_argument(
        "--grpc-port",
        type=int,
        nargs="?",
        const=50051,
        default=None,
        help="also serve the SpiceDB-compatible gRPC API (default port 50051)",
    )
    serve.set_defaults(func=_serve)

    # Subcommands implemented in their own modules, which parse their own flags; main()
    # hands them their argv before this parser sees it. Listed here for --help.
    for name, _, help_text in _DELEGATED:
        sub.add_parser(name, help=help_text, add_help=False)

    ret = sub.add_parser("retention", help="apply topic retention (cap / ttl)")
    ret.add_argument("action", choices=["run"])
    ret.set_defaults(func=_retention)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    delegated = {name: module for name, module, _ in _DELEGATED}
    if argv and argv[0] in delegated:
        import importlib

        return importlib.import_module(delegated[argv[0]]).main(argv[1:])
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        settings = settings_mod.load(
            host=getattr(args, "host", None),
            port=getattr(args, "port", None),
            grpc_port=getattr(args, "grpc_port", None),
        )
        return args.func(args, settings)
    except (SettingsError, EmbeddedPgError, MigrationError, KeyFileError) as exc:
        print(f"auditsync: {exc}", file=sys.stderr)
        return 2
    except psycopg.OperationalError as exc:
        print(f"auditsync: cannot reach PostgreSQL: {str(exc).strip()}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
