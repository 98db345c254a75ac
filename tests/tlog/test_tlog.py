"""The pure transparency-log core (``watch_service/protocol/tlog``): RFC 9162 hashing against
RFC 6962's published test vectors, proofs that verify and fail where they must, tiles grown
run by run equal to tiles built at once, signed notes in Go's key format, and the leaf bytes."""

from __future__ import annotations

import base64
import hashlib

import pytest

from watch_service.protocol.tlog import leaf, merkle, note, proof, tiles

pytestmark = pytest.mark.unit

# RFC 6962's test leaves and the roots of their first n (transparency-dev/merkle testonly).
VECTOR_LEAVES = [
    bytes.fromhex(h)
    for h in (
        "",
        "00",
        "10",
        "2021",
        "3031",
        "40414243",
        "5051525354555657",
        "606162636465666768696a6b6c6d6e6f",
    )
]
VECTOR_ROOTS = [
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]
# The note example of C2SP signed-note.
SPEC_VKEY = "example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k"
SPEC_NOTE = (
    "This is an example message.\n\n\u2014 example.com/foo Uw2QOkn8srV1yJGh2VYRlL1Tnagv1YEq6TfXppzi"
    "2ONncAlTgK7Ztg1ERYNZXsYjOBH3mFXmRKuwHjG1Yu72IneyaQM=\n"
)
# golang.org/x/mod/sumdb/note's documented example key pair.
GO_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
GO_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"


def hashes(n: int) -> list[bytes]:
    return [merkle.leaf_hash(b"leaf %d" % i) for i in range(n)]


def test_roots_match_the_rfc_6962_vectors() -> None:
    leaves = [merkle.leaf_hash(d) for d in VECTOR_LEAVES]
    assert [merkle.root_of(leaves[:n]).hex() for n in range(9)] == VECTOR_ROOTS


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 8, 255, 256, 257, 1000])
def test_every_inclusion_proof_verifies_and_a_flipped_byte_fails(size: int) -> None:
    leaves = hashes(size)
    src = merkle.LeafHashes(leaves)
    root = merkle.root_of(leaves)
    for i in sorted({0, 1, size // 2, size - 2, size - 1} & set(range(size))):
        path = merkle.inclusion_proof(src, i, size)
        merkle.verify_inclusion(i, size, leaves[i], path, root)
        if path:
            flipped = [bytearray(h) for h in path]
            flipped[-1][0] ^= 1
            with pytest.raises(merkle.ProofError):
                merkle.verify_inclusion(i, size, leaves[i], [bytes(h) for h in flipped], root)
            with pytest.raises(merkle.ProofError):
                merkle.verify_inclusion(i, size, leaves[i], path[:-1], root)
        with pytest.raises(merkle.ProofError):
            merkle.verify_inclusion(i, size, leaves[i], [*path, root], root)
        with pytest.raises(merkle.ProofError):
            merkle.verify_inclusion(i, size, merkle.leaf_hash(b"other"), path, root)


@pytest.mark.parametrize(
    "old,new",
    [
        (1, 2),
        (1, 3),
        (2, 3),
        (3, 7),
        (4, 8),
        (6, 8),
        (255, 256),
        (256, 257),
        (257, 1000),
        (1, 1000),
        (999, 1000),
        (5, 5),
    ],
)
def test_consistency_proofs_verify_and_a_changed_root_fails(old: int, new: int) -> None:
    leaves = hashes(new)
    src = merkle.LeafHashes(leaves)
    r1, r2 = merkle.root_of(leaves[:old]), merkle.root_of(leaves)
    p = merkle.consistency_proof(src, old, new)
    merkle.verify_consistency(old, new, r1, r2, p)
    other = merkle.root_of([*leaves[: old - 1], merkle.leaf_hash(b"changed")])
    with pytest.raises(merkle.ProofError):
        merkle.verify_consistency(old, new, other, r2, p)
    with pytest.raises(merkle.ProofError):
        merkle.verify_consistency(old, new, r1, r2, [*p, bytes(32)])


def test_tile_paths_are_c2sp_paths() -> None:
    assert tiles.tile_path(0, 1234067) == "tile/0/x001/x234/067"
    assert tiles.tile_path(2, 5, 17) == "tile/2/005.p/17"
    assert tiles.tile_path(-1, 1000, 1) == "tile/entries/x001/000.p/1"
    assert tiles.parse_tile_path("tile/1/x001/x234/067.p/3") == tiles.Tile(1, 1234067, 3)
    for bad in ("tile/0/1234", "tile/0/001.p/256", "tile/0/001.p/0", "tiles/0/001"):
        with pytest.raises(tiles.TileError):
            tiles.parse_tile_path(bad)


def test_new_tiles_follow_the_spec_example_of_70000() -> None:
    made = tiles.new_tiles(0, 70_000)
    assert len([t for t in made if t.level == 0 and t.width == 256]) == 273
    assert [t for t in made if t.width < 256] == [
        tiles.Tile(0, 273, 112),
        tiles.Tile(1, 1, 17),
        tiles.Tile(2, 0, 1),
    ]
    assert tiles.new_tiles(256, 257) == [tiles.Tile(0, 1, 1)]
    assert tiles.edge_tiles(70_000) == [
        tiles.Tile(0, 273, 112),
        tiles.Tile(1, 1, 17),
        tiles.Tile(2, 0, 1),
    ]


def grown(steps: list[int]) -> tuple[dict[str, bytes], list[bytes]]:
    """Tiles of a tree grown by ``steps`` entries at a time, each step from the stored edge."""
    store: dict[str, bytes] = {}
    entries: list[bytes] = []
    for step in steps:
        old = len(entries)
        new = [b"entry %d" % i for i in range(old, old + step)]
        edge = {t.level: tiles.split_hashes(store[t.path], t) for t in tiles.edge_tiles(old)}
        part = tiles.edge_tiles(old)[:1]
        old_entries = (
            tiles.unbundle(store[tiles.Tile(-1, part[0].n, part[0].width).path], part[0])
            if part and part[0].level == 0
            else []
        )
        growth = tiles.grow(old, edge, old_entries, new, merkle.leaf_hash)
        assert sorted(p for p in growth.tiles if "entries" not in p) == sorted(
            t.path for t in tiles.new_tiles(old, old + step)
        )
        store.update(growth.tiles)
        entries += new
    return store, entries


@pytest.mark.parametrize("steps", [[1], [255, 1], [256], [1, 1, 1, 300], [70_000 - 65_600, 65_600]])
def test_tiles_grown_run_by_run_prove_like_the_whole_tree(steps: list[int]) -> None:
    store, entries = grown(steps)
    size = len(entries)
    leaves = [merkle.leaf_hash(e) for e in entries]
    src = tiles.TileHashes(size, store.__getitem__)
    assert merkle.tree_hash(src, size) == merkle.root_of(leaves)
    whole = merkle.LeafHashes(leaves)
    for i in {0, size // 3, size - 1}:
        assert merkle.inclusion_proof(src, i, size) == merkle.inclusion_proof(whole, i, size)
    for old in {1, size // 2, size}:
        assert merkle.consistency_proof(src, old, size) == merkle.consistency_proof(
            whole, old, size
        )


def test_a_tampered_leaf_is_found_at_its_exact_index() -> None:
    store, entries = grown([700])
    size = len(entries)
    root = merkle.tree_hash(tiles.TileHashes(size, store.__getitem__), size)
    entries[433] = b"entry 433 edited"
    recomputed = [merkle.leaf_hash(e) for e in entries]
    assert merkle.root_of(recomputed) != root
    stored = [
        h
        for n in range(3)
        for h in tiles.split_hashes(
            store[tiles.Tile(0, n, min(256, size - 256 * n)).path],
            tiles.Tile(0, n, min(256, size - 256 * n)),
        )
    ]
    assert [i for i, (a, b) in enumerate(zip(recomputed, stored, strict=True)) if a != b] == [433]
    # a tile overwritten no longer matches the signed root: named when it is read
    src = tiles.TileHashes(size, store.__getitem__, root)
    assert merkle.inclusion_proof(src, 300, size)
    store["tile/0/001"] = bytes(32) + store["tile/0/001"][32:]
    src = tiles.TileHashes(size, store.__getitem__, root)
    with pytest.raises(tiles.TileError, match="tile/0/001 does not match the tree's signed root"):
        src.tile(0, 1)
    store["tile/0/002.p/188"] = bytes(32) + store["tile/0/002.p/188"][32:]
    with pytest.raises(tiles.TileError, match=r"right edge \(tile/0/002.p/188, tile/1/000.p/2\)"):
        tiles.TileHashes(size, store.__getitem__, root)


def test_note_keys_read_gos_format_and_the_spec_example_verifies() -> None:
    signer = note.Signer.parse(GO_SKEY)
    assert str(signer) == GO_SKEY
    assert str(signer.verifier) == GO_VKEY
    verifier = note.Verifier.parse(SPEC_VKEY)
    assert note.open_note(SPEC_NOTE, verifier) == "This is an example message.\n"
    with pytest.raises(note.NoteError, match="does not verify"):
        note.open_note(SPEC_NOTE.replace("example message", "example messagE"), verifier)
    with pytest.raises(note.NoteError, match="no signature of PeterNeumann"):
        note.open_note(SPEC_NOTE, signer.verifier)
    with pytest.raises(note.NoteError, match="id 530d903b does not match"):
        note.Verifier.parse(SPEC_VKEY.replace("530d903a", "530d903b"))


def test_a_signed_checkpoint_round_trips_and_names_its_origin() -> None:
    signer = note.Signer.parse(GO_SKEY)
    cp = note.Checkpoint("PeterNeumann/orders", 3, merkle.root_of(hashes(3)))
    signed = signer.sign(cp.text())
    assert signed.startswith(f"PeterNeumann/orders\n3\n{base64.b64encode(cp.root).decode()}\n\n")
    assert signed.splitlines()[-1].startswith("\u2014 PeterNeumann x0")
    assert note.open_checkpoint(signed, signer.verifier, "PeterNeumann/orders") == cp
    with pytest.raises(note.NoteError, match="not 'PeterNeumann/other'"):
        note.open_checkpoint(signed, signer.verifier, "PeterNeumann/other")
    with pytest.raises(note.NoteError, match="does not verify"):
        note.open_checkpoint(
            signed.replace("\n3\n", "\n4\n"), signer.verifier, "PeterNeumann/orders"
        )


def test_a_tlog_proof_round_trips_and_verifies() -> None:
    signer = note.Signer.parse(GO_SKEY)
    entries = [leaf.tombstone("orders", s, "cap") for s in range(1, 6)]
    leaves = [merkle.leaf_hash(e) for e in entries]
    cp = signer.sign(note.Checkpoint("PeterNeumann/orders", 5, merkle.root_of(leaves)).text())
    p = proof.Proof(3, tuple(merkle.inclusion_proof(merkle.LeafHashes(leaves), 3, 5)), cp)
    text = p.text()
    assert text.startswith("c2sp.org/tlog-proof@v1\nindex 3\n")
    assert proof.Proof.parse(text) == p
    assert proof.Proof.parse(text).verify(entries[3], signer.verifier, "PeterNeumann/orders") == 5
    with pytest.raises(merkle.ProofError):
        p.verify(entries[2], signer.verifier, "PeterNeumann/orders")


def test_leaf_bytes_are_exactly_as_documented() -> None:
    row = {
        "topic": "orders",
        "seq": 7,
        "ts": 1764300000123,
        "data": '{"a":1}',
        "data_sha256": hashlib.sha256(b'{"a":1}').hexdigest(),
        "meta": None,
        "tag": "t",
        "node": None,
        "origin": "delivered",
    }
    data_hash = "015abd7f5cc57a2dd94b7590f04ad8084273905ee33ec5cebeae62276a97f862"
    tag_hash = "e3b98a4da31a127d4bde6e43033f66ba274cab0eb7eb1c70ec41402bf6273dd8"
    assert (
        leaf.record(row)
        == (
            "auditsync.audit-log/v1 record\ntopic orders\nseq 7\nts 1764300000123\n"
            f"data {data_hash}\nmeta -\ntag {tag_hash}\nnode -\norigin delivered\n"
        ).encode()
    )
    assert leaf.tombstone("orders", 8, "ttl") == (
        b"auditsync.audit-log/v1 tombstone\ntopic orders\nseq 8\nreason ttl\n"
    )
    assert leaf.fields(leaf.tombstone("orders", 8, "ttl")) == {
        "kind": "tombstone",
        "topic": "orders",
        "seq": "8",
        "reason": "ttl",
    }
    with pytest.raises(leaf.LeafError, match="seq 7: data_sha256 is not the SHA-256 of its data"):
        leaf.record({**row, "data": '{"a":2}'})


def test_entries_are_rows_and_tombstones_until_the_first_seq_that_is_neither() -> None:
    from watch_service.protocol.tombstones import Tombstone

    def row(seq: int) -> dict:
        data = f'{{"n":{seq}}}'
        return {"topic": "t", "seq": seq, "ts": seq, "data": data, "origin": "backfill"}

    gaps = [Tombstone("cap", 3, 4), Tombstone("deleted", 4, 5)]
    got = list(leaf.entries("t", 2, [row(1), row(2), row(6), row(8)], gaps))
    assert got == [
        leaf.record(row(2)),
        leaf.tombstone("t", 3, "cap"),
        leaf.tombstone("t", 4, "mixed"),  # two reasons
        leaf.tombstone("t", 5, "recreated"),  # deleted, as a consumer sees it
        leaf.record(row(6)),
    ]  # 7: neither a row nor a gap; the tree stops before it
    assert list(leaf.entries("t", 1, [], [Tombstone("ttl", 1, 2)])) == [
        leaf.tombstone("t", 1, "ttl"),
        leaf.tombstone("t", 2, "ttl"),
    ]
    with pytest.raises(leaf.LeafError, match="seq 2 of t appears twice in the audit log"):
        list(leaf.entries("t", 1, [row(1), row(2), row(2)], []))


def test_seqs_nobody_copied_below_a_row_are_uncopied_leaves() -> None:
    from watch_service.protocol.tombstones import Tombstone

    def row(seq: int) -> dict:
        data = f'{{"n":{seq}}}'
        return {"topic": "t", "seq": seq, "ts": seq, "data": data, "origin": "backfill"}

    asked: list[tuple[int, int]] = []

    def first_missing(lo: int, hi: int) -> int:  # the source holds 1..5 and 9..20
        asked.append((lo, hi))
        return next((s for s in range(lo, hi + 1) if 6 <= s <= 8 or s > 20), hi + 1)

    gaps = [Tombstone("ttl", 3, 3)]
    got = list(leaf.entries("t", 1, [row(1), row(5), row(10)], gaps, first_missing))
    assert got == [
        leaf.record(row(1)),
        leaf.uncopied("t", 2),
        leaf.tombstone("t", 3, "ttl"),
        leaf.uncopied("t", 4),
        leaf.record(row(5)),
    ]  # 6: neither a row, a gap nor held by the source; the tree stops before it
    assert asked == [(2, 4), (6, 9)]  # once per run of seqs nobody copied
    assert leaf.uncopied("t", 4) == b"auditsync.audit-log/v1 uncopied\ntopic t\nseq 4\n"
    assert list(leaf.entries("t", 11, [row(10), row(15)], [], first_missing)) == [
        *[leaf.uncopied("t", s) for s in range(11, 15)],
        leaf.record(row(15)),
    ]  # and nothing after the last row: later seqs are not judged yet


def test_tombstone_ranges_are_the_gaps_seqs_without_a_row_one_reason_each() -> None:
    from watch_service.protocol.tombstones import Tombstone

    gaps = [Tombstone("ttl", 1, 4), Tombstone("cap", 5, 6), Tombstone("deleted", 7, 8),
            Tombstone("cap", 10, 12), Tombstone("deleted", 12, 13)]  # fmt: skip
    assert leaf.tombstone_ranges(gaps, 1, None, rows=[5, 9]) == [
        (1, 4, "ttl"),
        (6, 6, "cap"),  # 5 was copied before the cap took it: a record leaf
        (7, 8, "recreated"),
        (10, 11, "cap"),
        (12, 12, "mixed"),
        (13, 13, "recreated"),
    ]
    assert leaf.tombstone_ranges(gaps, 3, 7, rows=[4]) == [(3, 3, "ttl"), (5, 6, "cap"),
                                                           (7, 7, "recreated")]  # fmt: skip
    assert leaf.tombstone_ranges(gaps, 14, None) == []
    assert leaf.tombstone_ranges([Tombstone("ttl", 1, 10**9)], 1, None) == [(1, 10**9, "ttl")]
    # Adjacent gaps rows of one reason read as one range, as the leaves are the same.
    assert leaf.tombstone_ranges([Tombstone("ttl", 1, 2), Tombstone("ttl", 3, 3)], 1, None) == [
        (1, 3, "ttl")
    ]
