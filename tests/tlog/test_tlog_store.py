"""A topic log on storage (``spark_jobs.tlog_store``), on a real local folder: appends write
only the tiles that change, chunked growth writes what one growth writes, and a stored log
that was edited or signed by another key is refused before anything is signed over it."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_jobs.tlog_store import TlogError, TopicLog
from watch_service.protocol.tlog import leaf, merkle, note
from watch_service.storage import Storage

pytestmark = pytest.mark.unit

SIGNER = note.Signer.parse(
    "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
)


def entries(first: int, last: int) -> list[bytes]:
    return [leaf.tombstone("orders", s, "cap") for s in range(first, last + 1)]


def files(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }


def test_an_append_writes_only_new_tiles_and_the_right_edge(tmp_path: Path) -> None:
    log = TopicLog.at(Storage.at(tmp_path), "orders", SIGNER.verifier)
    log.append(SIGNER, entries(1, 510), run_id="r1")
    before = files(tmp_path / "tlog" / "orders")
    cp, signed = log.append(SIGNER, entries(511, 515), run_id="r2")
    after = files(tmp_path / "tlog" / "orders")
    assert sorted(set(after) - set(before)) == [
        "checkpoints/515",
        "runs/r2",
        "tile/0/001",
        "tile/0/002.p/3",
        "tile/1/000.p/2",
        "tile/entries/001",
        "tile/entries/002.p/3",
    ]
    assert {p: after[p] for p in before if p != "checkpoint"} == {
        p: d for p, d in before.items() if p != "checkpoint"
    }
    assert after["checkpoint"] == after["runs/r2"] == signed.encode()
    assert cp.root == merkle.root_of([merkle.leaf_hash(e) for e in entries(1, 515)])
    assert log.append(SIGNER, [], run_id="r3") == (cp, signed)  # nothing new: the same checkpoint
    assert after["runs/r2"] == (tmp_path / "tlog/orders/runs/r3").read_bytes()


def test_growing_in_chunks_writes_what_one_growth_writes(tmp_path: Path) -> None:
    one = TopicLog.at(Storage.at(tmp_path / "one"), "orders", SIGNER.verifier)
    one.append(SIGNER, entries(1, 70_000))
    chunked = TopicLog.at(Storage.at(tmp_path / "chunked"), "orders", SIGNER.verifier)
    chunked.append(SIGNER, entries(1, 70_000), chunk=300)
    assert files(tmp_path / "chunked") == files(tmp_path / "one")


def test_an_edited_stored_log_is_refused_before_signing(tmp_path: Path) -> None:
    log = TopicLog.at(Storage.at(tmp_path), "orders", SIGNER.verifier)
    log.append(SIGNER, entries(1, 300))
    edge = tmp_path / "tlog/orders/tile/0/001.p/44"
    edge.write_bytes(bytes(32) + edge.read_bytes()[32:])
    with pytest.raises(TlogError, match=r"right edge \(tile/0/001.p/44, tile/1/000.p/1\)"):
        log.append(SIGNER, entries(301, 301))
    other = note.Signer.generate("PeterNeumann")
    (tmp_path / "tlog/orders/checkpoint").write_text(
        other.sign(note.Checkpoint("PeterNeumann/orders", 300, bytes(32)).text())
    )
    with pytest.raises(TlogError, match="no signature of PeterNeumann\\+c74f20a3"):
        log.append(SIGNER, entries(301, 301))
