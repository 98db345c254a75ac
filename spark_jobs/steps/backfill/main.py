"""backfill's entry point.

    spark-submit spark_jobs/steps/backfill/main.py --work DIR --run-id ID
        [--target {audit_log,search_index,both}] [--num-partitions N] [--max-pushdown-ranges N]

Re-reads from PostgreSQL (bounded to their seq runs) the ``silent_gap`` and ``mismatch``
records of this run's detail and of earlier runs whose repairs are still open, and writes them
with the run's verified deliveries to the Iceberg audit log (one row per topic+seq): seqs it
does not hold yet by an append, better copies of seqs it holds by ``MERGE INTO`` on (topic,
seq). Only the rows of those seqs are read (per topic, bounded by seq), so the cost follows the
run's records, not the size of the day they land in. It upserts the repaired records into the
search index in bounded chunks. ``--target`` does one of the two only (Airflow may run them as
parallel tasks); the step is then recorded as ``backfill_<target>``. Re-running writes the same
rows.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs.common import jdbc, plan_size, progress, step_cache, store
from spark_jobs.common.cli import add_database, job_parser
from spark_jobs.common.seq_ranges import seq_runs
from spark_jobs.common.session import build_session, stop_session
from spark_jobs.steps.backfill.search import upsert_documents
from spark_jobs.steps.backfill.transforms import (
    delivered_rows,
    repair_keys,
    search_records,
    source_rows,
)
from spark_jobs.steps.backfill.writes import write_audit_log
from spark_jobs.warehouse.layout import Layout
from spark_jobs.warehouse.schemas import DELIVERIES, DETAIL, conform
from spark_jobs.warehouse.warehouse import Warehouse
from watch_service.store import runs

BOTH = "both"
TARGETS = ("audit_log", "search_index", BOTH)
UPSERT_CHUNK = 5_000


def build_parser():
    parser = job_parser("backfill", "Repair the audit log and the search index.")
    parser.add_argument("--work", required=True, help="the warehouse root")
    parser.add_argument(
        "--target",
        choices=TARGETS,
        default=BOTH,
        help="what to repair (default both); Airflow may run the two apart",
    )
    parser.add_argument(
        "--max-pushdown-ranges",
        type=int,
        default=1000,
        help="above this many seq runs, read each topic's whole span",
    )
    add_database(parser, partitions=True)
    return parser


def repair_spans(keys: DataFrame, limit: int) -> tuple[list[jdbc.Window], int]:
    """Seq runs of the repair keys per topic, each topic's whole span beyond ``limit``; and how
    many keys there are. The keys are distinct (topic, seq), so within ``limit`` the runs count
    them (``hi - lo`` each, ``lo`` exclusive): no second job."""
    spans = [(r["topic"], r["lo"], r["hi"]) for r in seq_runs(keys).limit(limit + 1).collect()]
    if len(spans) <= limit:
        return spans, sum(hi - lo for _, lo, hi in spans)
    wide = [
        (r["topic"], r["lo"], r["hi"], r["n"])
        for r in keys.groupBy("topic")
        .agg(
            (F.min("seq") - 1).alias("lo"),
            F.max("seq").alias("hi"),
            F.count(F.lit(1)).alias("n"),
        )
        .collect()
    ]
    return [(t, lo, hi) for t, lo, hi, _ in wide], sum(n for *_, n in wide)


@step_cache.releases_cache
def run(
    spark: SparkSession,
    args,
    hook: Callable[[str], None] | None = None,
    warehouse: Warehouse | None = None,
    quick: bool = True,
) -> dict:
    """Repair; returns the step's figures. ``hook(point)`` is called between the audit-log
    partition swaps (tests kill the step there). ``warehouse``: the runner's (default:
    attached from ``--work`` and ``--run-id``). ``quick``: a run with nothing to repair
    returns its figures without a Spark job; False runs the repair all the same (tests
    compare the two)."""
    timer = progress.Timer()
    wh = warehouse or Warehouse.attach(
        spark, Layout("", args.work, args.run_id), store.pipeline_url(args)
    )
    layout = wh.layout
    with store.connect(store.pipeline_url(args)) as conn:
        carried = runs.open_repairs(conn, layout.catalog, args.run_id)
        batches = runs.run_batches(conn, args.run_id) or (1, 0)
    nothing = not carried and batches[1] < batches[0]
    if quick and nothing and not wh.holds_run("detail", args.run_id):
        # No open repair, no delivery batch, no verdict of the run: nothing to read, repair or
        # write (``_repair`` would find no key and no delivered row), so no Spark job.
        return _recorded(args, wh, timer, _nothing_written(args.target))
    # Over few delivery rows the plans run interpreted (``plan_size``).
    with plan_size.sized(spark, wh.batch_rows(*batches)):
        return _repair(spark, args, hook, wh, timer, carried, batches)


def _repair(
    spark: SparkSession,
    args,
    hook: Callable[[str], None] | None,
    wh: Warehouse,
    timer: progress.Timer,
    carried: list[str],
    batches: tuple[int, int],
) -> dict:
    detail = conform(wh.run_rows("detail", args.run_id), DETAIL)
    everything = detail.unionByName(wh.run_details(carried).drop("run_id"))
    keys = step_cache.cache(repair_keys(everything))
    spans, key_count = repair_spans(keys, args.max_pushdown_ranges)
    records = jdbc.read_records_in(
        spark, jdbc.jdbc_target(args.database_url), spans, args.num_partitions
    )
    repaired = step_cache.cache(source_rows(records, keys))
    counts: dict[str, object] = {"repair_keys": key_count, "carried_runs": len(carried)}
    if args.target in (BOTH, "audit_log"):
        deliveries = conform(
            wh.read("deliveries").filter(F.col("batch").between(*batches)),
            DELIVERIES,
        )
        written = write_audit_log(
            wh, delivered_rows(deliveries, detail).unionByName(repaired), hook
        )
        counts.update(written)
    if args.target in (BOTH, "search_index"):
        indexed = refused = backfilled = 0
        # No repair key, no repaired record: nothing to read back for the index.
        every = search_records(repaired).toLocalIterator() if key_count else iter(())
        rows = (tuple(r) for r in every)
        while chunk := list(itertools.islice(rows, UPSERT_CHUNK)):
            done, bad = upsert_documents(args.database_url, chunk)
            indexed, refused, backfilled = indexed + done, refused + bad, backfilled + len(chunk)
        counts.update(backfilled=backfilled, indexed=indexed, index_refused=refused)
    return _recorded(args, wh, timer, counts)


def _nothing_written(target: str) -> dict[str, object]:
    """The counts of a run with nothing to repair (pure)."""
    counts: dict[str, object] = {"repair_keys": 0, "carried_runs": 0}
    if target in (BOTH, "audit_log"):
        counts.update(appended=0, merged=0)
    if target in (BOTH, "search_index"):
        counts.update(backfilled=0, indexed=0, index_refused=0)
    return counts


def _recorded(args, wh: Warehouse, timer: progress.Timer, counts: dict[str, object]) -> dict:
    """The step's figures, recorded in ``pipeline_runs`` with the audit log's snapshot when the
    step wrote it."""
    if args.target in (BOTH, "audit_log"):
        store.record_snapshots(args, wh, ("audit_log",))
    step = "backfill" if args.target == BOTH else f"backfill_{args.target}"
    figures = {"seconds": timer.seconds, **counts}
    store.record_step(args, step, figures)
    return figures


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    progress.configure()
    spark = build_session("auditsync-backfill", args.master)
    figures = run(spark, args)
    step = "backfill" if args.target == BOTH else f"backfill_{args.target}"
    progress.emit(step, figures["seconds"], figures)
    stop_session(spark)
    return 0


if __name__ == "__main__":
    sys.exit(main())
