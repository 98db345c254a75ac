"""The signed audit log over a warehouse a real pipeline run left (``test_pipeline``'s):
``publish`` twice (the first before the cap gap's reason is known, so its tree stops there),
``auditsync audit-log key|prove|verify`` in-process through the ``auditsync`` command, and two
tamperings, each named exactly: a row deleted through pyiceberg, a tile overwritten.

Topic A holds seqs 1, 2, 3 and 5..10 (4 was owed to no consumer and the source still holds it:
an uncopied leaf); B holds 1, 2 (trimmed after delivery) and 4..8, and its 1..3 are a ``cap``
gap: seq 3 is a tombstone leaf."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from spark_jobs import tlog_command
from spark_jobs.warehouse import readers
from spark_jobs.warehouse.layout import Layout
from watch_service import cli
from watch_service.protocol.tlog import leaf, merkle, note, proof


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(["audit-log", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def check_the_signed_log(
    monkeypatch: pytest.MonkeyPatch, capsys, pg_url: str, work: Path, a: str, b: str
) -> None:
    signer = note.Signer.generate("auditsync.test/log")
    monkeypatch.setenv("AUDITSYNC_LOG_SIGNING_KEY", str(signer))
    house = Layout("", str(work), "")
    rows = readers.audit_log(house, pg_url).to_pylist()
    by_seq = {(r["topic"], r["seq"]): r for r in rows}

    first = tlog_command.publish(
        str(work), pg_url, signer, run_id="r1", topics=[a, b], gaps={b: []}
    )
    assert [(p.topic, p.old_size, p.checkpoint.size) for p in first] == [(a, 0, 10), (b, 0, 2)]
    db = ["--database-url", pg_url]
    code, out, err = _cli(
        capsys, "publish", "--work", str(work), "--run", "r2", "--topic", a, "--topic", b, *db
    )
    assert (code, out, err) == (0, f"{a}: 10 leaves (+0)\n{b}: 8 leaves (+6)\n", "")

    b_leaves = [
        leaf.record(by_seq[(b, s)]) if s != 3 else leaf.tombstone(b, 3, "cap") for s in range(1, 9)
    ]
    b_root = merkle.root_of([merkle.leaf_hash(x) for x in b_leaves])
    code, out, err = _cli(capsys, "key")
    assert (code, out) == (0, f"{signer.verifier}\n")

    code, out, err = _cli(capsys, "prove", "--work", str(work), "--topic", b, "--seq", "3")
    assert (code, err) == (0, "")
    got = proof.Proof.parse(out)
    assert (got.index, got.extra) == (2, b_leaves[2])
    assert got.verify(b_leaves[2], signer.verifier, f"auditsync.test/log/{b}") == 8
    code, out, err = _cli(
        capsys, "prove", "--work", str(work), "--topic", a, "--seq", "2", "--as-of", "r1"
    )
    assert (
        proof.Proof.parse(out).verify(
            leaf.record(by_seq[(a, 2)]), signer.verifier, f"auditsync.test/log/{a}"
        )
        == 10
    )
    code, out, err = _cli(capsys, "prove", "--work", str(work), "--topic", a, "--seq", "4")
    assert (code, err, proof.Proof.parse(out).extra) == (0, "", leaf.uncopied(a, 4))
    assert (
        proof.Proof.parse(out).verify(
            leaf.uncopied(a, 4), signer.verifier, f"auditsync.test/log/{a}"
        )
        == 10
    )
    code, out, err = _cli(capsys, "prove", "--work", str(work), "--topic", a, "--seq", "11")
    assert (code, err) == (
        2,
        f"auditsync audit-log: seq 11 of {a} is not in its signed log (seqs 1..10)\n",
    )

    root = base64.b64encode(b_root).decode()
    code, out, err = _cli(capsys, "verify", "--work", str(work), "--topic", b, *db)
    assert (code, out, err) == (
        0,
        f"{b}: seqs 1..8 of the audit log match the signed log (size 8, root {root})\n",
        "",
    )
    code, out, err = _cli(
        capsys, "verify", "--work", str(work), "--topic", b, "--from", "r1", "--to", "r2", *db
    )
    assert (code, out) == (
        0,
        f"{b}: seqs 3..8 of the audit log match the signed log (size 8, root {root}), which "
        f"extends the signed log of size 2\n",
    )

    # Tampering: a row deleted behind the pipeline's back; a tile overwritten.
    from pyiceberg.expressions import And, EqualTo

    table = readers.load(house, pg_url, "audit_log")
    with pytest.warns(UserWarning, match="falling back to copy-on-write"):  # pyiceberg 0.12
        table.delete(And(EqualTo("topic", b), EqualTo("seq", 5)))  # type: ignore[call-arg, arg-type]
    code, out, err = _cli(capsys, "verify", "--work", str(work), "--topic", b, *db)
    assert (code, out, err) == (
        1,
        "",
        f"auditsync audit-log verify: {b}: seq 5 differs from the signed log: the audit log "
        f"has no row of it; the signed log holds a record\n",
    )
    tile = work / "tlog" / a / "tile" / "0" / "000.p" / "10"
    tile.write_bytes(bytes(32) + tile.read_bytes()[32:])
    code, out, err = _cli(capsys, "verify", "--work", str(work), "--topic", a, *db)
    assert (code, err) == (
        2,
        f"auditsync audit-log: the tiles of {a}: the tiles of the right edge (tile/0/000.p/10) "
        f"do not hash to the root\n",
    )
