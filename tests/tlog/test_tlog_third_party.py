"""A third party agrees: what auditsync writes and proves is checked by code auditsync did not
write. ``tests/tlog/go`` (pinned ``golang.org/x/mod`` and ``github.com/transparency-dev/merkle``
from the Go module proxy, built once per session, Go's build cache making later builds quick)
opens our signed checkpoints with ``sumdb/note``, reads our tiles through ``sumdb/tlog``'s
``TileHashReader`` (which authenticates every tile against the signed tree), proves every entry
of every bundle into the tree, and checks our inclusion and consistency proofs with
``transparency-dev/merkle``'s RFC 9162 verifiers. Flipped bytes fail there too."""

from __future__ import annotations

import base64
import shutil
from pathlib import Path

import pytest

from spark_jobs.tlog_store import TopicLog
from tests.tlog.house import go_check
from watch_service.protocol.tlog import leaf, merkle, note
from watch_service.storage import Storage

pytestmark = pytest.mark.unit

SIZES = [1, 2, 3, 255, 256, 257, 1000]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def entry(seq: int) -> bytes:
    if seq % 97 == 0:
        return leaf.tombstone("orders", seq, "ttl")
    row = {
        "topic": "orders",
        "seq": seq,
        "ts": 1764300000000 + seq,
        "data": f'{{"n":{seq}}}',
        "meta": None,
        "tag": "t",
        "node": "n1",
        "origin": "delivered",
    }
    return leaf.record(row)


@pytest.fixture(scope="module")
def grown(tmp_path_factory: pytest.TempPathFactory):
    """One topic log grown through every size of ``SIZES``, a checkpoint at each."""
    signer = note.Signer.generate("auditsync.test/log")
    folder = tmp_path_factory.mktemp("wh")
    log = TopicLog.at(Storage.at(folder), "orders", signer.verifier)
    entries: list[bytes] = []
    signed: dict[int, tuple[note.Checkpoint, str]] = {}
    for size in SIZES:
        new = [entry(s) for s in range(len(entries) + 1, size + 1)]
        signed[size] = log.append(signer, new)
        entries += new
    return signer, log, entries, signed


def test_go_verifies_checkpoints_tiles_and_proofs(tlogcheck: Path, grown) -> None:
    signer, log, entries, signed = grown
    tiles_dir = log.storage.location.path
    leaves = [merkle.leaf_hash(e) for e in entries]
    src = merkle.LeafHashes(leaves)
    request: dict = {
        "vkey": str(signer.verifier),
        "checkpoints": [],
        "inclusions": [],
        "consistencies": [],
    }
    for size in SIZES:
        request["checkpoints"].append(
            {"note": signed[size][1], "origin": log.origin, "tiles": tiles_dir}
        )
        root = signed[size][0].root
        assert root == merkle.root_of(leaves[:size])
        for i in sorted({0, size // 2, size - 1}):
            request["inclusions"].append(
                {
                    "index": i,
                    "size": size,
                    "leaf": b64(entries[i]),
                    "root": b64(root),
                    "proof": [
                        b64(h) for h in merkle.inclusion_proof(log.hashes(signed[size][0]), i, size)
                    ],
                }
            )
        for old in SIZES:
            if old <= size:
                request["consistencies"].append(
                    {
                        "old": old,
                        "new": size,
                        "old_root": b64(signed[old][0].root),
                        "new_root": b64(root),
                        "proof": [b64(h) for h in merkle.consistency_proof(src, old, size)],
                    }
                )
    answer = go_check(tlogcheck, request)
    assert answer["checkpoints"] == ["ok"] * len(SIZES)
    assert answer["inclusions"] == ["ok"] * len(request["inclusions"])
    assert answer["consistencies"] == ["ok"] * len(request["consistencies"])


def flip(text: str, at: int) -> str:
    raw = bytearray(base64.b64decode(text))
    raw[at] ^= 1
    return b64(bytes(raw))


def test_go_rejects_what_was_tampered_with(tlogcheck: Path, grown, tmp_path: Path) -> None:
    signer, log, entries, signed = grown
    cp, text = signed[1000]
    src = log.hashes(cp)
    other = note.Signer.generate("auditsync.test/log")
    root_line = b64(cp.root)
    forged = tmp_path / "forged"
    shutil.copytree(log.storage.location.path, forged)
    tile = forged / "tile" / "0" / "001"
    tile.write_bytes(
        tile.read_bytes()[:40] + bytes([tile.read_bytes()[40] ^ 1]) + tile.read_bytes()[41:]
    )
    bundle = tmp_path / "bundle"
    shutil.copytree(log.storage.location.path, bundle)
    entries_file = bundle / "tile" / "entries" / "002"
    entries_file.write_bytes(entries_file.read_bytes().replace(b"seq 600\n", b"seq 601\n"))
    incl = merkle.inclusion_proof(src, 600, 1000)
    cons = merkle.consistency_proof(src, 257, 1000)
    request = {
        "vkey": str(signer.verifier),
        "checkpoints": [
            {
                "note": text.replace(root_line, flip(root_line, 0)),
                "origin": log.origin,
                "tiles": "",
            },
            {"note": other.sign(cp.text()), "origin": log.origin, "tiles": ""},
            {"note": text, "origin": log.origin, "tiles": str(forged)},
            {"note": text, "origin": log.origin, "tiles": str(bundle)},
        ],
        "inclusions": [
            {
                "index": 600,
                "size": 1000,
                "leaf": b64(entries[600]),
                "root": b64(cp.root),
                "proof": [b64(h) for h in incl[:-1]] + [flip(b64(incl[-1]), 31)],
            },
            {
                "index": 600,
                "size": 1000,
                "leaf": b64(entries[601]),
                "root": b64(cp.root),
                "proof": [b64(h) for h in incl],
            },
        ],
        "consistencies": [
            {
                "old": 257,
                "new": 1000,
                "old_root": b64(signed[257][0].root),
                "new_root": b64(cp.root),
                "proof": [b64(h) for h in cons[:-1]] + [flip(b64(cons[-1]), 0)],
            },
            {
                "old": 257,
                "new": 1000,
                "old_root": b64(signed[256][0].root),
                "new_root": b64(cp.root),
                "proof": [b64(h) for h in cons],
            },
        ],
    }
    answer = go_check(tlogcheck, request)
    key = f"{signer.verifier.name}+{signer.verifier.id:08x}"
    assert answer["checkpoints"] == [
        f"invalid signature for key {key}",  # the root flipped
        "note has no verifiable signatures",  # signed by another key of the same name
        "downloaded inconsistent tile",  # tile/0/001 overwritten
        "entry 599: invalid transparency proof",  # seq 600's bundle entry edited
    ]
    assert [a.split("\n")[0] for a in answer["inclusions"] + answer["consistencies"]] == [
        "calculated root:"
    ] * 4
