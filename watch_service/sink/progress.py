"""The sink's counters and the progress line logged at a steady interval. Pure: the caller
owns the clock and the logger.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class Stats:
    frames: int = 0
    records: int = 0
    duplicates: int = 0
    reconnects: int = 0
    segments: int = 0
    rows: int = 0
    dropped: int = 0
    corrupted: int = 0
    indexed_docs: int = 0
    index_errors: int = 0
    index_rewinds: int = 0  # times the index was found behind this sink (restored, failed over)
    heads: dict[str, int] = dataclasses.field(default_factory=dict)
    cursors: dict[str, int] = dataclasses.field(default_factory=dict)

    def snapshot(self) -> Stats:
        return dataclasses.replace(self, heads=dict(self.heads), cursors=dict(self.cursors))


def lags(stats: Stats) -> dict[str, int]:
    """head_seq − cursor per topic, for topics whose head has been reported."""
    return {t: max(0, head - stats.cursors.get(t, 0)) for t, head in sorted(stats.heads.items())}


def progress_line(before: Stats, now: Stats, elapsed_s: float) -> str:
    rate = 1 / elapsed_s if elapsed_s > 0 else 0.0
    lag = " ".join(f"{t}={n}" for t, n in lags(now).items()) or "-"
    line = (
        f"frames/s={(now.frames - before.frames) * rate:.0f} "
        f"records/s={(now.records - before.records) * rate:.0f} lag[{lag}] "
        f"frames={now.frames} records={now.records} duplicates={now.duplicates} "
        f"reconnects={now.reconnects} segments={now.segments} rows={now.rows} "
        f"indexed={now.indexed_docs} index_errors={now.index_errors}"
    )
    if now.dropped or now.corrupted:
        line += f" FAULTS dropped={now.dropped} corrupted={now.corrupted}"
    return line
