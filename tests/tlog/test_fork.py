"""A rewound source is a visible fork of a topic's signed log (``spark_jobs.tlog_fork``), over
a real Iceberg audit log made with pyiceberg in the test PostgreSQL's catalog (no JVM): the
run that finds the rewind forks the log at the first changed seq and records the break with
both checkpoints; ``verify`` reports the break, not tampering; the seqs before it prove into
both logs; a change outside the rewound ranges still fails, naming its seq."""

from __future__ import annotations

import base64
from pathlib import Path

import pyarrow as pa
import pytest

from spark_jobs import tlog_command, tlog_fork, tlog_run, tlog_verify
from spark_jobs.tlog_store import TopicLog
from spark_jobs.warehouse import readers
from spark_jobs.warehouse.layout import Layout
from watch_service import settings
from watch_service.protocol.tlog import leaf, note
from watch_service.storage import Storage

from ..support import unique
from .house import SCHEMA, audit_table, row

pytestmark = pytest.mark.pg


def test_a_rewound_source_forks_the_log_and_verify_reports_the_break(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    layout = Layout("", str(tmp_path / "work"), "r1")
    topic = unique("tf")
    audit_table(layout, pg_url, [row(topic, s) for s in range(1, 11)])
    signer = note.Signer.generate("auditsync.test/fork")
    monkeypatch.setenv("AUDITSYNC_LOG_SIGNING_KEY", str(signer))
    first = tlog_run.check_and_publish(layout, pg_url, settings.load(), {})
    assert (first.status, first.checkpoints[topic]["size"]) == ("signed", 10)
    old_note = first.checkpoints[topic]["note"]

    # The source failed over: 6..10 were lost and written again with other content, and the
    # run's reconcile reports them rewound; its backfill made the audit log the source's.
    def rewind(rows: list[dict]) -> list[dict]:
        kept = [r for r in rows if r["seq"] < 6]
        return kept + [row(topic, s, "after") for s in range(6, 13)]

    table = readers.load(layout, pg_url, "audit_log")
    table.overwrite(pa.Table.from_pylist(rewind(readers.scan(table).to_pylist()), SCHEMA))
    second = Layout("", layout.work, "r2")
    found = tlog_run.check_and_publish(
        second, pg_url, settings.load(), {}, rewound={topic: [(6, 10)]}
    )  # {}: the database lost the last run's checkpoints; storage has them
    assert (found.failure, found.status) == (None, "signed")
    fork = found.checkpoints[topic]["fork"]
    new_note = found.checkpoints[topic]["note"]
    assert fork == {
        "topic": topic, "epoch": 1, "seq": 6, "range": [[6, 10]], "reason": "source_rewound",
        "run_id": "r2", "old": old_note, "new": new_note,
    }  # fmt: skip
    log = TopicLog.at(Storage(layout.warehouse), topic, signer.verifier)
    old, new = log.at_epoch(0).open(old_note), log.open(new_note)
    assert (log.epoch, old.size, new.size) == (1, 10, 12)
    stored = (tmp_path / "work" / "tlog" / topic / "forks" / "1" / "break").read_bytes()
    assert tlog_fork.Break.parse(stored).record() == fork

    table = readers.load(layout, pg_url, "audit_log")
    snap = table.current_snapshot().snapshot_id
    roots = [base64.b64encode(cp.root).decode() for cp in (old, new)]
    break_line = (
        f"{topic}: the signed log forks at seq 6 (source_rewound: seqs 6..10, run r2): the "
        f"checkpoint of size 10 (root {roots[0]}) is not extended by the checkpoint of size 12 "
        f"(root {roots[1]}); seqs 1..5 prove into both"
    )
    assert tlog_verify.verify(log, table, snap).line() == (
        f"{topic}: seqs 1..12 of the audit log match the signed log (size 12, root {roots[1]})"
        f"\n{break_line}"
    )
    assert tlog_verify.verify(log, table, snap, "r1", "r2").line() == (
        f"{topic}: seqs 6..12 of the audit log match the signed log (size 12, root {roots[1]})"
        f"\n{break_line}"
    )
    for seq in (1, 5):  # before the break: in both logs, as the run of each signed it
        want = leaf.record(row(topic, seq))
        for run, size in (("r1", 10), ("r2", 12)):
            p = tlog_command.prove(log, seq, run)
            assert p.verify(want, signer.verifier, log.origin) == size
    p = tlog_command.prove(log, 6, "r1")  # the old log still proves what it signed
    assert p.verify(leaf.record(row(topic, 6)), signer.verifier, log.origin) == 10

    # The next run: a row changed outside any rewound range is tampering, named by its seq.
    table.overwrite(
        pa.Table.from_pylist(
            [
                row(topic, 2, "forged") if r["seq"] == 2 else r
                for r in readers.scan(table).to_pylist()
            ],
            SCHEMA,
        )
    )
    third = tlog_run.check_and_publish(
        Layout("", layout.work, "r3"),
        pg_url,
        settings.load(),
        {},
        rewound={topic: [(6, 10)]},
    )  # fmt: skip ({}: no sweep cursor, so the window starts at seq 1)
    assert (third.topic, third.seq, third.failure) == (
        topic, 2, f"{topic}: seq 2 differs from the signed log: the audit log's row is not the "
        "row that was signed",
    )  # fmt: skip
