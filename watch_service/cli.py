"""The ``auditsync`` command: parse flags, build Settings once, call one function."""

from __future__ import annotations

import argparse
import asyncio
import errno
import logging
import sys
from typing import TextIO

import psycopg

from watch_service import logs
from watch_service import settings as settings_mod
from watch_service.settings import LOG_FORMATS, Settings, SettingsError
from watch_service.store.cluster import EmbeddedPgError
from watch_service.store.database import (
    check_url,
    database_url,
    embedded_cluster,
    ensure_database,
    mask_url,
)
from watch_service.store.migrate import MigrationError, migrate
from watch_service.web.auth import KeyFileError
from watch_service.web.listeners import (
    GRPC_SETTING,
    HTTP_SETTING,
    PERMIFY_GRPC_SETTING,
    StartupError,
    bind_http,
    check_grpc,
    http_unavailable,
)

log = logging.getLogger("auditsync")


def _say(text: str, stream: TextIO | None = None, level: str = "INFO") -> None:
    """A line for the user: as is, or one JSON line when ``AUDITSYNC_LOG_FORMAT=json``."""
    try:
        log_format = settings_mod.log_format()
    except SettingsError:  # named by the settings' own check; this line stays text
        log_format = "text"
    print(logs.line(text, log_format, level=level), file=stream or sys.stdout, flush=True)


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
            cluster.status()
            if not settings.database_url
            else f"external: {mask_url(settings.database_url)}"
        )
    return 0


def _migrate(args, settings: Settings) -> int:
    url = database_url(settings)
    applied = migrate(url)
    for n in applied:
        _say(f"applied {n}")
    if not applied:
        _say("schema is up to date")
    return 0


def _serve(args, settings: Settings) -> int:
    import uvloop

    from watch_service import serve as serve_mod
    from watch_service.app import create_app
    from watch_service.web.serving import serve

    logs.configure(settings.log_format)
    # Every listener is had before the database starts; the HTTP socket is bound now and
    # listens once the application (the pool, the gRPC server) has started.
    check_grpc(settings)
    workers = settings.workers or serve_mod.default_workers()
    sock = bind_http(settings.host, settings.port, listen=False, what=HTTP_SETTING)
    url = ensure_database(settings) if not args.no_migrate else database_url(settings)
    app = create_app(settings, url)  # with workers too: a bad setting fails here, once
    if workers > 1:
        code = serve_mod.supervise(workers, settings, url, sock)  # the workers inherit sock
        _say(_stopped_message(settings, url), sys.stderr)
        return code
    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            # on_listening runs once every listener is up: the one "serving on" line
            runner.run(serve(app, settings, sock=sock, on_listening=lambda: _log_serving(settings)))
    except RuntimeError as exc:  # grpc's bind failure, when the port was taken after the check
        if "Failed to bind" not in str(exc):
            raise
        raise StartupError(
            f"cannot listen on a gRPC port of {settings.host} ({GRPC_SETTING}, "
            f"{PERMIFY_GRPC_SETTING}): {exc}"
        ) from None
    except OSError as exc:  # the HTTP port taken between the bind and the listen
        if exc.errno != errno.EADDRINUSE:
            raise
        raise http_unavailable(settings.host, settings.port, exc) from None
    _say(_stopped_message(settings, url), sys.stderr)
    return 0


def _log_serving(settings: Settings) -> None:
    if settings.grpc_port is not None:
        log.info("SpiceDB-compatible gRPC on %s:%d", settings.host, settings.grpc_port)
    if settings.permify_grpc_port is not None:
        log.info("Permify-compatible gRPC on %s:%d", settings.host, settings.permify_grpc_port)
    log.info("serving on http://%s:%d", settings.host, settings.port)


def _stopped_message(settings: Settings, url: str) -> str:
    """What Ctrl-C (or SIGTERM) stopped, and what it left running."""
    stopped = f"auditsync: stopped the service on http://{settings.host}:{settings.port}"
    if settings.embedded and embedded_cluster(settings).status() == "running":
        return (
            f"{stopped}; the embedded PostgreSQL at {mask_url(url)} is still running: "
            "`auditsync db stop` stops it"
        )
    return f"{stopped}; PostgreSQL at {mask_url(url)} was not started by it and is left as it was"


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
        _say(f"{topic}: trimmed [{gap.gap_from}, {gap.gap_to}] ({gap.reason})")
    _say(f"retention: {len(written)} gap(s) written")
    return 0


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the description's paragraphs as written."""


# The optional libraries a delegated command may need, with the extra that installs each: a
# missing one is a one-line error, not a traceback.
_EXTRA_OF = {
    "pyarrow": "sink",
    "pyspark": "pipeline",
    "pyiceberg": "pipeline",
    "great_expectations": "pipeline",
}
_DELEGATED = (
    ("watch", "watch_service.sink.watch_command", "watch topics and print frames"),
    ("sink", "watch_service.sink", "keep the landing zone and search index in sync"),
    ("pipeline", "spark_jobs.runner", "run compact → reconcile → backfill → verify"),
    (
        "audit-log",
        "spark_jobs.audit_log_command",
        "show the warehouse's audit log as a pipeline run left it (time travel)",
    ),
    (
        "spark-connect",
        "watch_service.tools.spark_connect",
        "the long-running Spark Connect server the pipeline's steps use",
    ),
)


DESCRIPTION = """\
auditsync: audit-log sync over PostgreSQL. Writers append records to gap-free topic logs; the
watch service streams every change (SSE, Permify and SpiceDB watch shapes); a sink lands what
it receives as Parquet; a Spark pipeline reconciles deliveries and proves nothing was lost.

Start with `auditsync serve` (it starts the embedded PostgreSQL in $AUDITSYNC_HOME/pg, migrates
and serves on 127.0.0.1:8400); stop the database afterwards with `auditsync db stop`. Settings
come from the environment (AUDITSYNC_*, DATABASE_URL; see docs/operations.md) and a few flags."""


def version() -> str:
    """The installed package's version (``unknown`` when run from a bare checkout)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("auditsync")
    except PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="auditsync", description=DESCRIPTION, formatter_class=_Formatter
    )
    parser.add_argument("--version", action="version", version=f"auditsync {version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    db = sub.add_parser(
        "db",
        help="the embedded PostgreSQL cluster",
        description="The embedded PostgreSQL cluster in $AUDITSYNC_HOME/pg "
        "(port AUDITSYNC_PG_PORT, default 54329, loopback only).",
    )
    db.add_argument(
        "action",
        choices=["start", "stop", "status", "url"],
        help="start (initialise the first time; prints its URL), stop, status "
        "(running / stopped / absent, or external: URL with DATABASE_URL), url (the URL in use)",
    )
    db.set_defaults(func=_db)

    mig = sub.add_parser(
        "migrate",
        help="apply pending schema migrations",
        description="Apply pending numbered migrations to the database in use.",
    )
    mig.set_defaults(func=_migrate)

    serve = sub.add_parser(
        "serve",
        help="run the watch service",
        description="Start the embedded PostgreSQL when it is the one in use, migrate, and "
        "serve the HTTP API (and the SpiceDB gRPC API with --grpc-port). Ctrl-C stops the "
        "service and leaves the database running.",
    )
    serve.add_argument(
        "--host", metavar="H", help="listen address (default: $AUDITSYNC_HOST, else 127.0.0.1)"
    )
    serve.add_argument(
        "--port", type=int, metavar="P", help="HTTP port (default: $AUDITSYNC_PORT, else 8400)"
    )
    serve.add_argument(
        "--workers",
        type=int,
        help="worker processes on the one port (default: one per core; see watch_service/serve)",
    )
    serve.add_argument(
        "--no-migrate",
        action="store_true",
        help="do not start the embedded cluster or migrate before serving (default: off)",
    )
    serve.add_argument(
        "--grpc-port",
        type=int,
        nargs="?",
        const=50051,
        default=None,
        metavar="P",
        help="also serve the SpiceDB-compatible gRPC API, on P or 50051 when given bare "
        "(default: $AUDITSYNC_GRPC_PORT, else off; needs the authz extra)",
    )
    serve.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        help="log lines as text or one JSON object per line "
        "(default: $AUDITSYNC_LOG_FORMAT, else text)",
    )
    serve.add_argument(
        "--access-log",
        action="store_const",
        const=True,
        help="log one line per HTTP request (default: $AUDITSYNC_ACCESS_LOG, else off)",
    )
    serve.add_argument(
        "--permify-grpc-port",
        type=int,
        nargs="?",
        const=3478,
        default=None,
        help="also serve Permify's gRPC API, package base.v1 (default port 3478)",
    )
    serve.set_defaults(func=_serve)

    # Subcommands implemented in their own modules, which parse their own flags; main()
    # hands them their argv before this parser sees it. Listed here for --help.
    for name, _, help_text in _DELEGATED:
        sub.add_parser(name, help=help_text, add_help=False)

    ret = sub.add_parser(
        "retention",
        help="apply topic retention (cap / ttl)",
        description="One retention pass over every topic with a cap or ttl.",
    )
    ret.add_argument("action", choices=["run"], help="run: one pass; prints each gap written")
    ret.set_defaults(func=_retention)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    delegated = {name: module for name, module, _ in _DELEGATED}
    if argv and argv[0] in delegated:
        import importlib

        try:
            module = importlib.import_module(delegated[argv[0]])
        except ModuleNotFoundError as exc:
            missing = (exc.name or "").partition(".")[0]
            if missing not in _EXTRA_OF:
                raise
            print(
                f"auditsync {argv[0]}: {missing} is not installed: "
                f"pip install 'auditsync[{_EXTRA_OF[missing]}]'",
                file=sys.stderr,
            )
            return 2
        return module.main(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        logs.configure_command(settings_mod.log_format())
        settings = settings_mod.load(
            host=getattr(args, "host", None),
            port=getattr(args, "port", None),
            grpc_port=getattr(args, "grpc_port", None),
            log_format=getattr(args, "log_format", None),
            access_log=getattr(args, "access_log", None),
            permify_grpc_port=getattr(args, "permify_grpc_port", None),
            workers=getattr(args, "workers", None),
        )
        if settings.database_url:
            check_url(settings.database_url)
        return args.func(args, settings)
    except (SettingsError, EmbeddedPgError, MigrationError, KeyFileError, StartupError) as exc:
        _say(f"auditsync: {exc}", sys.stderr, "ERROR")
        return 2
    except psycopg.OperationalError as exc:
        _say(f"auditsync: cannot reach PostgreSQL: {str(exc).strip()}", sys.stderr, "ERROR")
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
