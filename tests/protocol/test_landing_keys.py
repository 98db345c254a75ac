"""The dated segment keys and the walks that list only the folders a reader needs
(``protocol/landing_keys``), over an in-memory folder tree that counts its listings."""

import datetime as dt

import pytest

from watch_service.protocol.landing_keys import (
    SegmentKey,
    folder_of,
    folders_since,
    newest_segment,
    parse_segment,
    segment_key,
    segments_after,
    segments_since,
    writing_folder,
)

pytestmark = pytest.mark.unit


class Tree:
    """Folders of files, listed one folder at a time, as ``Storage.listing`` does."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.listed: list[str] = []

    def __call__(self, rel: str) -> tuple[list[str], list[tuple[str, float]]]:
        self.listed.append(rel)
        prefix = f"{rel}/" if rel else ""
        below = [n[len(prefix) :] for n in self.names if n.startswith(prefix)]
        folders = sorted({n.split("/", 1)[0] for n in below if "/" in n})
        files = sorted((n, 1.0) for n in below if "/" not in n)
        return folders, files


def seg(folder: str, first: int, last: int) -> str:
    return segment_key(folder, first, last)


HISTORY = [
    seg("", 1, 2),  # an earlier sink's root-level segments
    seg("", 3, 4),
    "state.json",
    "faults/part-000000000001-000000000002.jsonl",
    seg("2026-01-01/23", 5, 6),
    seg("2026-01-02/00", 7, 8),
    seg("2026-01-02/00", 9, 9),
    seg("2026-01-02/05", 10, 12),
    seg("2026-01-03/01", 13, 13),
    "2026-01-03/01/notes.txt",
]


def test_keys_name_the_utc_hour_and_parse_back():
    at = dt.datetime(2026, 1, 2, 23, 59, tzinfo=dt.timezone(dt.timedelta(hours=-2)))
    assert folder_of(at) == "2026-01-03/01"
    assert seg("2026-01-03/01", 1, 2) == "2026-01-03/01/part-000000000001-000000000002.parquet"
    assert parse_segment("2026-01-03/01/part-000000000001-000000000002.parquet") == SegmentKey(
        "2026-01-03/01", 1, 2
    )
    assert parse_segment("part-000000000003-000000000004.parquet") == SegmentKey("", 3, 4)
    assert parse_segment("2026-01-03/part-000000000001-000000000002.parquet") is None
    assert parse_segment("2026-01-03/01/part-1-2.parquet") is None


def test_the_sink_never_writes_into_an_earlier_folder():
    now = dt.datetime(2026, 1, 2, 5, 30, tzinfo=dt.UTC)
    assert writing_folder(now, "") == "2026-01-02/05"
    assert writing_folder(now, "2026-01-02/04") == "2026-01-02/05"
    # the clock stepped back an hour: the last folder stays the one written
    assert writing_folder(now, "2026-01-02/06") == "2026-01-02/06"


def test_a_reader_lists_only_the_folders_at_or_after_its_last():
    tree = Tree(HISTORY)
    found = segments_since(tree, "2026-01-02/05")
    assert [k.name for k in found] == [
        seg("", 1, 2),
        seg("", 3, 4),
        seg("2026-01-02/05", 10, 12),
        seg("2026-01-03/01", 13, 13),
    ]
    # the root, the two days from the last one, the two hours from it; never 2026-01-01
    # nor 2026-01-02/00
    assert tree.listed == ["", "2026-01-02", "2026-01-02/05", "2026-01-03", "2026-01-03/01"]


def test_a_first_reader_lists_every_folder():
    tree = Tree(HISTORY)
    assert [(k.folder, k.first) for k in segments_since(tree)] == [
        ("", 1),
        ("", 3),
        ("2026-01-01/23", 5),
        ("2026-01-02/00", 7),
        ("2026-01-02/00", 9),
        ("2026-01-02/05", 10),
        ("2026-01-03/01", 13),
    ]


def test_the_newest_segment_costs_the_newest_folders():
    tree = Tree(HISTORY)
    assert newest_segment(tree) == SegmentKey("2026-01-03/01", 13, 13)
    assert tree.listed == ["", "2026-01-03", "2026-01-03/01"]
    emptied = Tree([*HISTORY[:-2], "2026-01-03/02/.tmp-part-x"])  # a folder with no segment
    assert newest_segment(emptied) == SegmentKey("2026-01-02/05", 10, 12)
    assert newest_segment(Tree(HISTORY[:3])) == SegmentKey("", 3, 4)
    assert newest_segment(Tree(["state.json"])) is None


def test_segments_after_a_frame_walk_back_only_to_it():
    tree = Tree(HISTORY)
    assert [k.name for k in segments_after(tree, 9)] == [
        seg("2026-01-02/05", 10, 12),
        seg("2026-01-03/01", 13, 13),
    ]
    # back to the folder holding frame 9, not further
    assert tree.listed == [
        "",
        "2026-01-03",
        "2026-01-03/01",
        "2026-01-02",
        "2026-01-02/05",
        "2026-01-02/00",
    ]
    assert [k.first for k in segments_after(Tree(HISTORY), 3)] == [3, 5, 7, 9, 10, 13]


def test_folders_since():
    assert folders_since(Tree(HISTORY), "2026-01-02/00") == [
        "2026-01-02/00",
        "2026-01-02/05",
        "2026-01-03/01",
    ]


def test_a_root_segment_written_after_dated_ones_keeps_frame_order():
    tree = Tree([*HISTORY, seg("", 14, 14)])  # hand-written at the root after the dated ones
    assert newest_segment(tree) == SegmentKey("", 14, 14)
    assert [k.first for k in segments_since(tree, "2026-01-03/01")] == [1, 3, 13, 14]
