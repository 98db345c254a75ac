"""A topic's transparency log on the warehouse's storage: C2SP tiles and signed checkpoints
under ``<warehouse>/tlog/<topic>/``, written through ``watch_service.storage`` (a path or
``s3://``), read back authenticated. The Merkle arithmetic is ``watch_service.protocol.tlog``;
this module only moves bytes.

- ``tile/<L>/<N>[.p/<W>]`` and ``tile/entries/<N>[.p/<W>]``: immutable. A run writes only the
  tiles its new leaves change: new full tiles and the partial right edge. An object already
  there with other bytes is never replaced: the stored log was edited, or the audit log forked.
- ``checkpoints/<size>``: every signed checkpoint, kept (the same size signs to the same bytes,
  Ed25519 being deterministic); ``checkpoint``: the latest, the one C2SP names.
- ``forks/<k>/``: the log again, the same layout, after its ``k``-th fork (a rewound source
  changed seqs a signed checkpoint covered: ``spark_jobs.tlog_fork``), with its ``break``
  record. The newest fork is the topic's current log; the older ones stay as they were signed.

Before it grows the log, :meth:`TopicLog.append` opens the latest stored checkpoint with the
operator's verifier key and authenticates the right edge against it, so a database restored to
an earlier state cannot make a run sign over what was signed before.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator

from watch_service.protocol.errors import AuditsyncError
from watch_service.protocol.tlog import merkle, note, tiles
from watch_service.storage import Storage

FOLDER = "tlog"
FORKS = "forks"
LATEST = "checkpoint"
CHUNK = 64 * tiles.WIDTH  # entries held in memory at once while growing


class TlogError(AuditsyncError):
    """The stored log cannot be read, does not verify, or would be rewritten; one line why."""


def origin(verifier: note.Verifier, topic: str) -> str:
    """A topic log's checkpoint origin: the key's name, then the topic."""
    return f"{verifier.name}/{topic}"


@dataclasses.dataclass
class TopicLog:
    storage: Storage  # <warehouse>/tlog/<topic>, or its forks/<epoch>
    topic: str
    verifier: note.Verifier
    epoch: int = 0  # how many forks came before this log
    home: Storage | None = None  # <warehouse>/tlog/<topic> (None: ``storage`` itself)

    @classmethod
    def at(
        cls, warehouse: Storage, topic: str, verifier: note.Verifier, epoch: int | None = None
    ) -> TopicLog:
        """The topic's log after ``epoch`` forks (default: the newest, its current log)."""
        base = warehouse.child(FOLDER, topic)
        if epoch is None:
            epoch = max(epochs(base), default=0)
        folder = base if epoch == 0 else base.child(FORKS, str(epoch))
        return cls(folder, topic, verifier, epoch, base)

    def at_epoch(self, epoch: int) -> TopicLog:
        """The same topic's log after ``epoch`` forks."""
        home = self.home or self.storage
        folder = home if epoch == 0 else home.child(FORKS, str(epoch))
        return TopicLog(folder, self.topic, self.verifier, epoch, home)

    @property
    def origin(self) -> str:
        return origin(self.verifier, self.topic)

    def read(self, path: str) -> bytes:
        data = self.storage.read_bytes(path)
        if data is None:
            raise TlogError(f"{self.storage.uri(path)} is missing")
        return data

    # -- checkpoints ---------------------------------------------------------------------

    def signed(self, size: int | None = None) -> str | None:
        """The signed checkpoint of ``size`` leaves (default: the latest), None if none."""
        data = self.storage.read_bytes(LATEST if size is None else f"checkpoints/{size}")
        return None if data is None else data.decode()

    def open(self, signed: str) -> note.Checkpoint:
        try:
            return note.open_checkpoint(signed, self.verifier, self.origin)
        except note.NoteError as exc:
            raise TlogError(f"the checkpoint of {self.topic} does not verify: {exc}") from None

    def latest(self) -> tuple[note.Checkpoint, str] | None:
        signed = self.signed()
        return None if signed is None else (self.open(signed), signed)

    def hashes(self, checkpoint: note.Checkpoint) -> tiles.TileHashes:
        """The tree's hashes from its tiles, each authenticated against ``checkpoint``."""
        try:
            return tiles.TileHashes(checkpoint.size, self.read, checkpoint.root)
        except tiles.TileError as exc:
            raise TlogError(f"the tiles of {self.topic}: {exc}") from None

    def leaf_hashes(self, src: tiles.TileHashes, start: int, end: int) -> list[bytes]:
        """Leaf hashes ``[start, end)`` from authenticated level-0 tiles."""
        out: list[bytes] = []
        for n in range(start >> tiles.HEIGHT, (end + tiles.WIDTH - 1) >> tiles.HEIGHT):
            hashes = _tile(src, 0, n)
            first = n << tiles.HEIGHT
            out += hashes[max(0, start - first) : end - first]
        return out

    def entries(self, size: int, n: int) -> list[bytes]:
        """The entries of level-0 bundle ``n`` of a tree of ``size`` leaves (unauthenticated:
        hash them and compare with the tile)."""
        width = min(tiles.WIDTH, size - (n << tiles.HEIGHT))
        tile = tiles.Tile(-1, n, width)
        try:
            return tiles.unbundle(self.read(tile.path), tile)
        except tiles.TileError as exc:
            raise TlogError(f"the entries of {self.topic}: {exc}") from None

    # -- growing -------------------------------------------------------------------------

    def append(
        self,
        signer: note.Signer,
        entries: Iterable[bytes],
        run_id: str | None = None,
        chunk: int = CHUNK,
    ) -> tuple[note.Checkpoint, str]:
        """Add ``entries`` after the latest checkpoint, write the tiles that change (a chunk
        at a time: full tiles as they fill, the partial right edge at the end), then sign and
        store the new checkpoint (also as ``runs/<run_id>``); returns it and its signed text."""
        if str(signer.verifier) != str(self.verifier):
            raise TlogError("the signing key is not the key of the verifier key given")
        found = self.latest()
        old = found[0] if found else note.Checkpoint(self.origin, 0, merkle.EMPTY_ROOT)
        src = self.hashes(old)
        edge = {t.level: _tile(src, t.level, t.n) for t in tiles.edge_tiles(old.size)}
        tail: list[bytes] = []  # the entries of the partial level-0 tile
        if old.size % tiles.WIDTH:
            n = old.size >> tiles.HEIGHT
            tail = self.entries(old.size, n)
            if [merkle.leaf_hash(e) for e in tail] != edge[0]:
                raise TlogError(f"the entries of {self.topic} do not match its tile/0 {n}")
        size, partial = old.size, {}
        for part in _chunks(entries, chunk):
            try:
                growth = tiles.grow(size, edge, tail, part, merkle.leaf_hash)
            except tiles.TileError as exc:
                raise TlogError(f"{self.topic}: {exc}") from None
            size += len(part)
            for path, data in growth.tiles.items():
                if tiles.parse_tile_path(path).width == tiles.WIDTH:
                    self.write_once(path, data)
                else:
                    partial[path] = data
            edge = tiles.edge_after(edge, growth, size)
            kept = size % tiles.WIDTH
            tail = (tail + part)[len(tail) + len(part) - kept :] if kept else []
        if found and size == old.size:
            return self._record_run(found[1], run_id, found[0])
        edge_paths = [t.path for t in tiles.edge_tiles(size)]
        if size % tiles.WIDTH:
            edge_paths.append(tiles.Tile(-1, size >> tiles.HEIGHT, size % tiles.WIDTH).path)
        for path in edge_paths:
            if path in partial:  # else a level this append did not reach: stored already
                self.write_once(path, partial[path])
        new_src = tiles.TileHashes(size, self.read)
        checkpoint = note.Checkpoint(self.origin, size, merkle.tree_hash(new_src, size))
        signed = signer.sign(checkpoint.text())
        self.write_once(f"checkpoints/{size}", signed.encode())
        self.storage.write_bytes(LATEST, signed.encode())
        return self._record_run(signed, run_id, checkpoint)

    def _record_run(
        self, signed: str, run_id: str | None, checkpoint: note.Checkpoint
    ) -> tuple[note.Checkpoint, str]:
        if run_id is not None:
            self.write_once(f"runs/{run_id}", signed.encode())
        return checkpoint, signed

    def write_once(self, path: str, data: bytes) -> None:
        there = self.storage.read_bytes(path)
        if there is None:
            self.storage.write_bytes(path, data)
        elif there != data:
            raise TlogError(
                f"{self.storage.uri(path)} already holds other bytes: the stored log was "
                f"edited, or the audit log no longer extends it"
            )


def epochs(base: Storage) -> list[int]:
    """The forks a topic's log folder holds (``forks/<k>``), in order."""
    return sorted(int(k) for k in base.folders(FORKS) if k.isdigit())


def _chunks(items: Iterable[bytes], size: int) -> Iterator[list[bytes]]:
    chunk: list[bytes] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _tile(src: tiles.TileHashes, level: int, n: int) -> list[bytes]:
    try:
        return src.tile(level, n)
    except tiles.TileError as exc:
        raise TlogError(str(exc)) from None
