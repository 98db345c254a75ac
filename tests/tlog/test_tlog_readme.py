"""The docs' "Checking the audit log without us" (docs/audit-log.md), as it stands: its key
commands run in a shell, its leaf format is the one ``protocol.tlog.leaf`` writes, and its
script (no auditsync code: Python and ``cryptography``) accepts a proof ``auditsync audit-log
prove`` gives for a row as ``audit-log show --json`` prints it, printing what the page says,
and refuses the row edited."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from spark_jobs import audit_log_command, tlog_command
from spark_jobs.tlog_store import TopicLog
from tests.project.test_readme import blocks
from tests.support import ROOT
from watch_service.protocol.tlog import leaf, note
from watch_service.storage import Storage

pytestmark = pytest.mark.unit

TITLE = "# Checking the audit log without us"


def section() -> str:
    """The docs page that holds the section (moved out of the README, whole)."""
    text = (ROOT / "docs" / "audit-log.md").read_text()
    assert text.startswith(TITLE)
    return text


def row(seq: int) -> dict:
    data = json.dumps({"n": seq})
    return {"topic": "orders", "seq": seq, "ts": 1764144000000 + seq, "tag": None,
            "node": "web-1" if seq % 2 else None, "meta": '{"m":1}' if seq == 3 else None,
            "data": data, "data_sha256": hashlib.sha256(data.encode()).hexdigest(),
            "origin": "delivered", "run_id": "r1", "date": "2026-11-26"}  # fmt: skip


def test_the_key_commands_run_as_shown(tmp_path: Path) -> None:
    first = next(b for b in blocks(section()) if b.lang == "sh")
    shown = [line.split("#")[0].strip() for line in first.lines[:3]]
    assert shown[1] == "export AUDITSYNC_LOG_SIGNING_KEY_FILE=$PWD/log.key"
    cli = f"{sys.executable} -m watch_service.cli "
    script = "\n".join(re.sub(r"^auditsync ", cli, line) for line in shown)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0, done.stderr
    signer = note.Signer.parse((tmp_path / "log.key").read_text())
    assert signer.name == "example.com/auditsync"
    assert done.stdout == f"{signer.verifier}\n"


def test_the_leaf_format_is_the_one_written() -> None:
    record, tombstone, uncopied = [b for b in blocks(section()) if b.lang == "text"][:3]
    written = leaf.record(row(3)).decode().splitlines()
    assert [line.split(" <")[0] for line in record.lines] == [
        line.rsplit(" ", 1)[0] if i else line for i, line in enumerate(written)
    ]
    assert [line.split(" <")[0] for line in tombstone.lines] == [
        "auditsync.audit-log/v1 tombstone",
        "topic",
        "seq",
        "reason",
    ]
    written = leaf.uncopied("orders", 7).decode()
    assert "\n".join(uncopied.lines) + "\n" == written.replace("orders", "<topic>").replace(
        "seq 7", "seq <seq>"
    )


def test_the_script_checks_a_row_without_our_code(tmp_path: Path) -> None:
    script = next(b for b in blocks(section()) if b.lang == "python")
    (tmp_path / "check_row.py").write_text("\n".join(script.lines) + "\n")
    signer = note.Signer.generate("example.com/auditsync")
    log = TopicLog.at(Storage.at(tmp_path / "wh"), "orders", signer.verifier)
    log.append(signer, [leaf.record(row(s)) for s in range(1, 11)])
    (tmp_path / "orders-3.tlog-proof").write_text(tlog_command.prove(log, 3).text())
    shown = re.search(r"prints `([^`]+)`", section())
    assert shown is not None

    def check(printed_row: dict) -> subprocess.CompletedProcess:
        (tmp_path / "row.json").write_text(audit_log_command.render_json([printed_row]) + "\n")
        argv = [sys.executable, "check_row.py", str(signer.verifier), "orders-3.tlog-proof",
                "row.json"]  # fmt: skip
        return subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=60)

    done = check(row(3))
    assert (done.returncode, done.stdout) == (0, shown.group(1) + "\n"), done.stderr
    done = check({**row(3), "data": '{"n":4}'})
    assert (done.returncode, done.stderr) == (1, "orders seq 3 is not the row the log signed\n")
    other = note.Signer.generate("example.com/auditsync")
    done = subprocess.run(
        [sys.executable, "check_row.py", str(other.verifier), "orders-3.tlog-proof", "row.json"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert (done.returncode, done.stderr) == (
        1,
        f"the checkpoint has no signature of {other.verifier}\n",
    )
