"""compact's entry point: the landing segments not yet compacted -> one new deliveries batch.

    spark-submit spark_jobs/steps/compact/main.py --landing LOCATION --work LOCATION --run-id ID

Lists each consumer's segments (``<landing>/<consumer>/<YYYY-MM-DD>/<HH>/part-*.parquet``, a
path, ``file://`` or ``s3://``) from the folder of its last compacted segment on
(``protocol/landing_keys``), takes those after that segment, and appends them as batch N+1 to
the Iceberg table ``deliveries``. The listing costs the landing root, the consumer roots and
the folders written since the last run, whatever the history; root-level segments an earlier
sink wrote are listed with their consumer's root until retention deletes them. Which segments
the batch consumed, and each consumer's last frame and last folder, ride in the same commit as
the rows (the snapshot's summary property ``auditsync.compact``, cumulative), so a crash before
the commit leaves nothing and a re-run after it finds the segments consumed: every segment is
compacted exactly once. Nothing new: no batch. The step's figures go to ``pipeline_runs`` when
a database URL is given, with what landing retention reads (``consumed``, ``through``), and
the re-delivery ranges the sinks recorded in the new segments' footers (``redelivered``).
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from collections.abc import Callable

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from spark_jobs.common import errors, local_rows, plan_size, progress, step_cache, store
from spark_jobs.common.cli import add_database, job_parser
from spark_jobs.common.session import build_session, stop_session
from spark_jobs.steps.compact.transforms import LAST_FRAMES, batch_figures, compact
from spark_jobs.warehouse import tables
from spark_jobs.warehouse.layout import Layout
from spark_jobs.warehouse.schemas import LANDING
from spark_jobs.warehouse.warehouse import Warehouse
from watch_service.protocol.landing import FOOTER_BEFORE, footer
from watch_service.protocol.landing_keys import LEGACY, parse_segment, segments_since
from watch_service.protocol.redelivery import from_footer, merge
from watch_service.storage import Storage

CONSUMER_RE = re.compile(r"([^/]+)/(.+)")


@dataclasses.dataclass(frozen=True)
class Segment:
    consumer: str
    name: str  # relative to the landing root
    first: int
    last: int
    folder: str = LEGACY  # "YYYY-MM-DD/HH" inside the consumer's landing; LEGACY: its root


def new_segments(names: list[str], state: dict) -> list[Segment]:
    """Segments after each consumer's ``segment_through``, in frame order (pure)."""
    found: list[Segment] = []
    for name in names:
        m = CONSUMER_RE.fullmatch(name)
        key = parse_segment(m.group(2)) if m else None
        if m is None or key is None:
            continue
        consumer, first, last = m.group(1), key.first, key.last
        through = state["consumers"].get(consumer, {}).get("segment_through", 0)
        if last <= through:
            continue
        if first <= through:
            raise errors.WarehouseError(
                f"landing segment {name} overlaps frames already compacted "
                f"(through frame {through})"
            )
        found.append(Segment(consumer, name, first, last, key.folder))
    return sorted(found, key=lambda s: (s.consumer, s.first))


def listed_names(landing: Storage, state: dict) -> list[str]:
    """Each consumer's segments from the folder of its last compacted one on (every folder
    for a consumer not compacted yet, or compacted before segments had folders)."""
    names = []
    for consumer in landing.folders():
        since = state["consumers"].get(consumer, {}).get("folder", LEGACY)
        keys = segments_since(landing.child(consumer).listing, since)
        names += [f"{consumer}/{k.name}" for k in keys]
    return names


def progress_figures(state: dict, segments: list[Segment]) -> dict:
    """What retention reads from the run's row (pure): ``consumed``, the frames this batch
    took per consumer; ``through``, each consumer's last compacted frame and its folder."""
    consumed: dict[str, list[int]] = {}
    for seg in segments:
        span = consumed.setdefault(seg.consumer, [seg.first, seg.last])
        span[0], span[1] = min(span[0], seg.first), max(span[1], seg.last)
    through = {
        c: [v["segment_through"], v.get("folder", LEGACY)]
        for c, v in state["consumers"].items()
        if "segment_through" in v
    }
    return {"consumed": consumed, "through": through}


def first_starts(
    landing: Storage,
    segments: list[Segment],
    state: dict,
    footers: dict[str, Footer] | None = None,
) -> list[tuple]:
    """``LAST_FRAMES`` rows for the consumers compacted for the first time: the frame id in force
    just before their first segment (its footer's ``before_frame_id``, the sink's session
    start), numbered as the frame before it. Without it a consumer's first frame has no
    previous id and reconcile falls back to what the frame shows (``min(seq) - 1``), which
    puts a record lost from the very start of that frame out of scope. A segment without the
    key (an older sink, a hand-written landing) gives no row."""
    rows = []
    seen = {c for c, v in state["consumers"].items() if "frame_no" in v}
    for seg in segments:
        if seg.consumer in seen:
            continue
        seen.add(seg.consumer)
        found = (
            footers[seg.name].sink
            if footers is not None
            else footer(landing.parquet_schema(seg.name).metadata)
        ) or {}
        if (before := found.get(FOOTER_BEFORE)) is not None:
            rows.append((seg.consumer, seg.first - 1, before))
    return rows


@dataclasses.dataclass(frozen=True)
class Footer:
    """What a segment's Parquet footer says: its row count and the sink's footer (None)."""

    rows: int
    sink: dict | None


def read_footers(landing: Storage, segments: list[Segment]) -> dict[str, Footer]:
    """Each segment's footer (its Parquet metadata only: no row is read), eight at a time."""
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow.parquet as pq

    def read(seg: Segment) -> Footer:
        meta = pq.read_metadata(landing.path(seg.name), filesystem=landing.fs)
        return Footer(meta.num_rows, footer(meta.metadata))

    with ThreadPoolExecutor(max_workers=8) as pool:
        return dict(zip([s.name for s in segments], pool.map(read, segments), strict=True))


def redelivered(
    landing: Storage, segments: list[Segment], footers: dict[str, Footer] | None = None
) -> list[dict]:
    """The re-delivery ranges the sinks kept in the footers of the batch's segments, merged per
    consumer (``protocol/redelivery``): each a range of seqs a sink was sent at or below its
    cursor, ``duplicate``, ``reissued`` (a source restored with its sessions) or
    ``unchecked``. One footer read per new segment (``footers``: read already)."""
    footers = read_footers(landing, segments) if footers is None else footers
    found = [from_footer(footers[seg.name].sink) for seg in segments]
    out: list[dict] = []
    for consumer in sorted({s.consumer for s in segments}):
        mine = [r for seg, rs in zip(segments, found, strict=True) if seg.consumer == consumer
                for r in rs]  # fmt: skip
        out += [{"consumer": consumer, **r.as_dict()} for r in merge(mine)]
    return out


def next_state(
    state: dict, segments: list[Segment], lasts: dict[str, tuple[int, str | None]], run_id: str
) -> dict:
    """The cumulative state after a batch of ``segments`` (pure)."""
    consumers = {k: dict(v) for k, v in state["consumers"].items()}
    for seg in segments:
        entry = consumers.setdefault(seg.consumer, {})
        entry["segment_through"] = max(entry.get("segment_through", 0), seg.last)
        entry["folder"] = max(entry.get("folder", LEGACY), seg.folder)
    for consumer, (frame_no, frame_id) in lasts.items():
        consumers.setdefault(consumer, {}).update(frame_no=frame_no, frame_id=frame_id)
    return {"batch": state["batch"] + 1, "run_id": run_id, "consumers": consumers}


def build_parser():
    parser = job_parser("compact", "New landing segments -> a deliveries batch.")
    parser.add_argument("--landing", required=True, help="the sink's landing zone (path or URI)")
    parser.add_argument("--work", required=True, help="the warehouse (path or URI)")
    add_database(parser)
    return parser


@step_cache.releases_cache
def run(
    spark: SparkSession,
    args,
    hook: Callable[[str], None] | None = None,
    warehouse: Warehouse | None = None,
) -> dict:
    """Compact what is new; returns the step's figures. ``hook(point)`` is called just before
    the commit (tests kill the step there). ``warehouse``: the runner's (default: attached
    from ``--landing``, ``--work`` and ``--run-id``)."""
    timer = progress.Timer()
    wh = warehouse or Warehouse.attach(
        spark, Layout(args.landing, args.work, args.run_id), store.pipeline_url(args)
    )
    layout = wh.layout
    state = wh.compact_state()
    landing = Storage(layout.landing_location)
    segments = new_segments(listed_names(landing, state), state)
    counts: dict[str, object] = {
        "batch": None, "segments": 0, "rows": 0, "records": 0, "redelivered": [],
    }  # fmt: skip
    committed = state
    if segments:
        footers = read_footers(landing, segments)
        # Over few rows the plans run interpreted (``plan_size``).
        with plan_size.sized(spark, sum(f.rows for f in footers.values())):
            committed, counts = _compact(spark, args, hook, wh, state, segments, footers)
    figures = {"seconds": timer.seconds, **counts, **progress_figures(committed, segments)}
    store.record_step(args, "compact", figures)
    store.record_snapshots(args, wh, ("deliveries",))
    return figures


def _compact(
    spark: SparkSession,
    args,
    hook: Callable[[str], None] | None,
    wh: Warehouse,
    state: dict,
    segments: list[Segment],
    footers: dict[str, Footer],
) -> tuple[dict, dict[str, object]]:
    """The new segments as one deliveries batch, committed with compact's next state; that
    state and the step's counts."""
    layout = wh.layout
    landing = Storage(layout.landing_location)
    rows = spark.read.schema(LANDING).parquet(
        *[layout.landing_location.join(s.name).hadoop_uri for s in segments]
    )
    previous = local_rows.frame(
        spark,
        [(c, v["frame_no"], v.get("frame_id")) for c, v in state["consumers"].items()
         if "frame_no" in v]
        + first_starts(landing, segments, state, footers),
        LAST_FRAMES,
    )  # fmt: skip
    numbered = compact(rows, previous).withColumn("batch", F.lit(state["batch"] + 1))
    batch = step_cache.cache(numbered)
    figures_rows = batch_figures(batch).collect()
    lasts = {r["consumer"]: (r["frame_no"], r["frame_id"]) for r in figures_rows}
    record = next_state(state, segments, lasts, args.run_id)
    if hook:
        hook("compact.committing")
    wh.append(
        "deliveries",
        batch,
        {
            tables.COMPACT_PROPERTY: json.dumps(record, sort_keys=True),
            tables.RUN_PROPERTY: args.run_id,
            tables.STEP_PROPERTY: "compact",
        },
    )
    batch.unpersist()
    return record, {
        "batch": record["batch"],
        "segments": len(segments),
        "rows": sum(r["rows"] for r in figures_rows),
        "records": sum(r["records"] for r in figures_rows),
        "redelivered": redelivered(landing, segments, footers),
    }


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    progress.configure()
    spark = build_session("auditsync-compact", args.master)
    figures = run(spark, args)
    progress.emit("compact", figures["seconds"], figures)
    stop_session(spark)
    return 0


if __name__ == "__main__":
    sys.exit(main())
