"""``auditsync audit-log key|keygen|publish|prove|verify``: the signed log's subcommands (their
parsers and their dispatch), over ``tlog_command`` (publish, prove, the log's reads) and
``tlog_verify`` (the leaves recomputed and compared). Exit codes: 0 done, 1 a verification
that failed (its one line naming the first seq that differs), 2 anything that cannot be done.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from spark_jobs.tlog_command import (
    current_snapshot,
    prove,
    publish,
    signer_of,
    verifier_of,
)
from spark_jobs.tlog_store import TopicLog
from spark_jobs.warehouse.layout import Layout
from watch_service.protocol.errors import AuditsyncError
from watch_service.protocol.tlog import note
from watch_service.storage import Storage


def add_parsers(sub: Any) -> None:
    """The subcommands of ``auditsync audit-log`` this module runs."""
    sub.add_parser("key", help="print the verifier key of the signing key (to publish)")
    gen = sub.add_parser("keygen", help="print a new signing key (nothing is stored)")
    gen.add_argument("--name", required=True, help="the key's name, e.g. example.com/auditsync")
    for name, text in (
        ("publish", "grow each topic's signed log by the audit log's new rows"),
        ("prove", "print a C2SP tlog-proof of one seq"),
        (
            "verify",
            "recompute a topic's log from the audit log and check it against the signed one",
        ),
    ):
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("--work", required=True, help="the warehouse: a path, file:// or s3://")
        if name != "publish":
            cmd.add_argument("--topic", required=True)
            cmd.add_argument("--verifier-key", default=None, help="default: the signing key's")
        else:
            cmd.add_argument("--topic", action="append", default=None, help="default: all")
            cmd.add_argument("--run", default=None, help="record the checkpoint as this run's")
        if name != "prove":
            cmd.add_argument(
                "--database-url",
                default=None,
                help="default: DATABASE_URL, else the embedded cluster",
            )
    prove_cmd = sub.choices["prove"]
    prove_cmd.add_argument("--seq", type=int, required=True)
    prove_cmd.add_argument("--as-of", default=None, metavar="RUN_ID", help="that run's checkpoint")
    verify_cmd = sub.choices["verify"]
    verify_cmd.add_argument("--from", dest="from_run", default=None, metavar="RUN_A")
    verify_cmd.add_argument("--to", dest="to_run", default=None, metavar="RUN_B")


def run(args: argparse.Namespace) -> int:
    """One subcommand; a failed verification prints its one line and exits 1, anything that
    cannot be done prints why and exits 2."""
    import psycopg

    from spark_jobs import tlog_verify
    from watch_service import settings as settings_mod

    def database_url() -> str:
        from spark_jobs.runner import _database_url

        return _database_url(args.database_url)

    def pipeline_url(source: str) -> str:  # the catalog's: AUDITSYNC_PIPELINE_DATABASE_URL
        from spark_jobs.runner import _pipeline_url

        return _pipeline_url(None, source)

    try:
        settings = settings_mod.load()
        if args.action == "keygen":
            signer = note.Signer.generate(args.name)
            print(signer)
            print(f"verifier key: {signer.verifier}", file=sys.stderr)
        elif args.action == "key":
            print(verifier_of(settings))
        elif args.action == "publish":
            signer = signer_of(settings)
            source = database_url()
            for p in publish(
                args.work,
                source,
                signer,
                run_id=args.run,
                topics=args.topic,
                pipeline_url=pipeline_url(source),
            ):
                print(f"{p.topic}: {p.checkpoint.size} leaves (+{p.checkpoint.size - p.old_size})")
        elif args.action == "prove":
            storage = Storage(Layout("", args.work, "").warehouse)
            log = TopicLog.at(storage, args.topic, verifier_of(settings, args.verifier_key))
            sys.stdout.write(prove(log, args.seq, args.as_of).text())
        else:
            layout = Layout("", args.work, "")
            log = TopicLog.at(
                Storage(layout.warehouse), args.topic, verifier_of(settings, args.verifier_key)
            )
            from spark_jobs import time_travel

            table = time_travel.load(layout, pipeline_url(database_url()))
            found = tlog_verify.verify(
                log, table, current_snapshot(table, None), args.from_run, args.to_run
            )
            print(found.line())
    except tlog_verify.VerifyFailure as exc:
        print(f"auditsync audit-log verify: {exc}", file=sys.stderr)
        return 1
    except (AuditsyncError, note.NoteError) as exc:
        print(f"auditsync audit-log: {exc}", file=sys.stderr)
        return 2
    except psycopg.OperationalError as exc:
        print(f"auditsync audit-log: cannot use the database: {exc}".rstrip(), file=sys.stderr)
        return 2
    return 0
