"""C2SP ``tlog-tiles``: the tree's hashes as immutable tiles of 256 hashes.

A tile at level ``L`` holds the hashes of tree height ``8 * L``, 256 of them when full:
``tile/<L>/<N>`` with ``N`` in 3-digit path elements, all but the last ``x``-prefixed
(1234067 is ``x001/x234/067``), and ``.p/<W>`` for a partial tile of ``W`` hashes (the right
edge). ``tile/entries/<N>[.p/<W>]`` holds the leaves themselves, each as a big-endian uint16
length and its bytes. :func:`grow` turns the right edge of a tree (its partial tiles) and new
leaves into exactly the tiles that change; :class:`TileHashes` serves any complete-subtree
hash of a tree from its tiles, for proofs.
"""

from __future__ import annotations

import dataclasses
import re
import struct
from collections.abc import Callable, Iterable, Sequence

from watch_service.protocol.errors import AuditsyncError
from watch_service.protocol.tlog import merkle
from watch_service.protocol.tlog.merkle import HASH_SIZE, perfect_root

HEIGHT = 8
WIDTH = 1 << HEIGHT
MAX_ENTRY = 0xFFFF
_PATH = re.compile(r"tile/(\d+|entries)/((?:x\d{3}/)*\d{3})(?:\.p/(\d+))?")


class TileError(AuditsyncError):
    """A tile path, tile or entry bundle that is malformed; the message says what."""


@dataclasses.dataclass(frozen=True, order=True)
class Tile:
    """``level`` -1 is the entry bundle of the level-0 tile ``n``."""

    level: int
    n: int
    width: int = WIDTH

    @property
    def path(self) -> str:
        return tile_path(self.level, self.n, self.width)


def _index_path(n: int) -> str:
    text = f"{n:03d}"
    text = "0" * (-len(text) % 3) + text
    groups = [text[i : i + 3] for i in range(0, len(text), 3)]
    return "/".join([f"x{g}" for g in groups[:-1]] + groups[-1:])


def tile_path(level: int, n: int, width: int = WIDTH) -> str:
    if not 1 <= width <= WIDTH:
        raise TileError(f"tile width {width} is not between 1 and {WIDTH}")
    kind = "entries" if level < 0 else str(level)
    partial = "" if width == WIDTH else f".p/{width}"
    return f"tile/{kind}/{_index_path(n)}{partial}"


def parse_tile_path(path: str) -> Tile:
    m = _PATH.fullmatch(path)
    width = int(m.group(3)) if m and m.group(3) else WIDTH
    if m is None or (m.group(3) is not None and not 1 <= width < WIDTH):
        raise TileError(f"{path!r} is not a tile path (tile/<L>/<N>[.p/<W>])")
    level = -1 if m.group(1) == "entries" else int(m.group(1))
    return Tile(level, int(m.group(2).replace("x", "").replace("/", "")), width)


def new_tiles(old: int, new: int) -> list[Tile]:
    """The hash tiles a tree grown from ``old`` to ``new`` leaves writes (full, then partial)."""
    tiles: list[Tile] = []
    level = 0
    while new >> (HEIGHT * level) > 0:
        old_n, new_n = old >> (HEIGHT * level), new >> (HEIGHT * level)
        if old_n != new_n:
            tiles += [Tile(level, n) for n in range(old_n >> HEIGHT, new_n >> HEIGHT)]
            if new_n % WIDTH:
                tiles.append(Tile(level, new_n >> HEIGHT, new_n % WIDTH))
        level += 1
    return tiles


def edge_tiles(size: int) -> list[Tile]:
    """The partial tiles of a tree of ``size`` leaves, level 0 first: its right edge."""
    out = []
    level = 0
    while size >> (HEIGHT * level) > 0:
        count = size >> (HEIGHT * level)
        if count % WIDTH:
            out.append(Tile(level, count >> HEIGHT, count % WIDTH))
        level += 1
    return out


def split_hashes(data: bytes, tile: Tile) -> list[bytes]:
    if len(data) != tile.width * HASH_SIZE:
        raise TileError(f"{tile.path} holds {len(data)} bytes, not {tile.width * HASH_SIZE}")
    return [data[i : i + HASH_SIZE] for i in range(0, len(data), HASH_SIZE)]


def bundle(entries: Iterable[bytes]) -> bytes:
    out = bytearray()
    for entry in entries:
        if len(entry) > MAX_ENTRY:
            raise TileError(f"an entry of {len(entry)} bytes is over {MAX_ENTRY}")
        out += struct.pack(">H", len(entry)) + entry
    return bytes(out)


def unbundle(data: bytes, tile: Tile) -> list[bytes]:
    entries, at = [], 0
    while at < len(data):
        if at + 2 > len(data):
            raise TileError(f"{tile.path} ends inside an entry length")
        (size,) = struct.unpack_from(">H", data, at)
        entries.append(data[at + 2 : at + 2 + size])
        at += 2 + size
    if at != len(data) or len(entries) != tile.width:
        raise TileError(f"{tile.path} does not hold {tile.width} whole entries")
    return entries


@dataclasses.dataclass
class Growth:
    """What :func:`grow` writes: tile path -> bytes, in the order to write them."""

    tiles: dict[str, bytes]


def grow(
    old: int,
    edge: dict[int, list[bytes]],
    old_entries: Sequence[bytes],
    entries: Sequence[bytes],
    leaf: Callable[[bytes], bytes],
) -> Growth:
    """The tiles of a tree grown from ``old`` leaves by ``entries``. ``edge[L]`` holds the
    hashes of the old tree's partial tile at level ``L`` (missing: none) and ``old_entries``
    the entries of its partial level-0 bundle; ``leaf`` hashes an entry."""
    out: dict[str, bytes] = {}
    if not entries:
        return Growth(out)
    new = old + len(entries)
    start = old >> HEIGHT  # the first level-0 tile that changes
    bundle_entries = list(old_entries) + list(entries)
    hashes = list(edge.get(0, [])) + [leaf(e) for e in entries]
    if len(bundle_entries) != len(hashes) or len(hashes) != new - (start << HEIGHT):
        raise TileError(f"the right edge of size {old} does not match its tiles")
    level = 0
    while hashes and new >> (HEIGHT * level) > 0:
        promoted: list[bytes] = []
        for i in range(0, len(hashes), WIDTH):
            chunk = hashes[i : i + WIDTH]
            tile = Tile(level, start + i // WIDTH, len(chunk))
            if level == 0:
                out[Tile(-1, tile.n, tile.width).path] = bundle(bundle_entries[i : i + WIDTH])
            out[tile.path] = b"".join(chunk)
            if len(chunk) == WIDTH:
                promoted.append(perfect_root(chunk))
        level += 1
        old_count = old >> (HEIGHT * level)
        start = old_count >> HEIGHT
        hashes = list(edge.get(level, [])) + promoted if promoted else []
        if hashes and len(hashes) != (new >> (HEIGHT * level)) - (start << HEIGHT):
            raise TileError(
                f"the right edge of size {old} does not match its tiles at level {level}"
            )
    return Growth(out)


def edge_after(edge: dict[int, list[bytes]], growth: Growth, size: int) -> dict[int, list[bytes]]:
    """The right edge of the tree of ``size`` leaves ``growth`` made from one whose edge was
    ``edge``: a level it did not touch keeps its partial tile."""
    return {
        t.level: split_hashes(growth.tiles[t.path], t) if t.path in growth.tiles else edge[t.level]
        for t in edge_tiles(size)
    }


class TileHashes:
    """Complete-subtree hashes of a tree of ``size`` leaves, read from its tiles through
    ``read(path) -> bytes`` (cached per tile). Given the tree's signed ``root``, every tile is
    authenticated before use, as Go's ``tlog.TileHashReader`` does: the right edge by hashing
    to the root, every other tile by hashing to its hash in the tile above; one that does not
    raises :class:`TileError` naming it."""

    def __init__(self, size: int, read: Callable[[str], bytes], root: bytes | None = None) -> None:
        self.size = size
        self.read = read
        self.cache: dict[Tile, list[bytes]] = {}
        self.checking = False
        if root is not None and size > 0:
            found = merkle.tree_hash(self, size)
            if found != root:
                edge = ", ".join(t.path for t in edge_tiles(size))
                raise TileError(f"the tiles of the right edge ({edge}) do not hash to the root")
            self.checking = True  # what was read so far is authenticated by the root

    def tile(self, level: int, n: int) -> list[bytes]:
        count = self.size >> (HEIGHT * level)
        width = min(WIDTH, count - n * WIDTH)
        if width <= 0:
            raise TileError(f"a tree of size {self.size} has no tile {level}/{n}")
        tile = Tile(level, n, width)
        if tile not in self.cache:
            hashes = split_hashes(self.read(tile.path), tile)
            if self.checking and perfect_root(hashes) != self.stored(HEIGHT * (level + 1), n):
                raise TileError(f"{tile.path} does not match the tree's signed root")
            self.cache[tile] = hashes
        return self.cache[tile]

    def stored(self, level: int, index: int) -> bytes:
        tile_level, height = divmod(level, HEIGHT)
        first = index << height  # the first hash of tree height 8 * tile_level it spans
        hashes = self.tile(tile_level, first >> HEIGHT)
        at = first % WIDTH
        return perfect_root(hashes[at : at + (1 << height)])
