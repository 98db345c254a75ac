"""reconcile's entry point: judge the window of every (consumer, topic) delivered to.

    spark-submit spark_jobs/steps/reconcile/main.py --work DIR --run-id ID [--num-partitions N]
        [--full]

Reads the delivery batches no earlier run reconciled, continues each (consumer, topic) from its
``reconciled_through`` in PostgreSQL up to the highest cursor it reached, capped at the topic's
head read now (``rewind.cap_scope``: a window never passes the source's head), reads the source
``records`` and ``gaps`` of those windows only (bounded in the JDBC query), judges late copies
of earlier seqs and copies above the head (``late.py``), judges again the phantoms the head has
since passed (``revisit.py``), looks for a rewound source where its late copies, landed
``rewound`` frames and heads point (``evidence.py``), and writes the run's partitions of the
Iceberg tables ``detail`` and ``summary`` (this run's verdicts only) and ``ledger``, and then,
in ONE PostgreSQL transaction, the run's summary rows (``source_rewound`` rows counting the
rewound seqs among them; the ranges are in the figures), windows, consumed batches and range
digests. A crash before that commit leaves nothing an incremental run reads; a re-run redoes it.

``--full`` is the audit mode: every batch the incremental runs consumed, judged from scratch
into the tables ``audit_detail`` and ``audit_summary``, compared with the net verdicts of all
incremental runs; nothing in PostgreSQL changes. Seqs that left the source (retention, topic
deletion) after an incremental verdict judged them are judged with that verdict's source hash
(``revisit.remembered``), so the audit agrees across trims and deletions.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from typing import Any

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType

from spark_jobs.common import errors, jdbc, local_rows, plan_size, progress, step_cache, store
from spark_jobs.common import statuses as st
from spark_jobs.common.cli import add_database, job_parser
from spark_jobs.common.seq_ranges import seq_runs
from spark_jobs.common.session import build_session, stop_session
from spark_jobs.steps.reconcile import evidence, rewind
from spark_jobs.steps.reconcile.late import (
    held_copies,
    late_copies,
    merge_summary,
    rejudge,
)
from spark_jobs.steps.reconcile.revisit import earlier_copies, phantoms_due, remembered, revisions
from spark_jobs.steps.reconcile.scope import (
    PROGRESS,
    SCOPE,
    SIGNALLED,
    consumer_scope,
    rewound_frames,
    signalled_ranges,
)
from spark_jobs.steps.reconcile.transforms import reconcile, summarize
from spark_jobs.warehouse import tables
from spark_jobs.warehouse.layout import Layout
from spark_jobs.warehouse.schemas import (
    DELIVERIES,
    DETAIL,
    GAPS,
    LEDGER,
    SUMMARY,
    conform,
    struct,
)
from spark_jobs.warehouse.warehouse import Warehouse
from watch_service.store import runs, session_marks

DELIVERIES_BATCH = tables.SCHEMAS["deliveries"][0]
_STR, _LONG = StringType(), LongType()
DELTAS = struct(
    ("consumer", _STR), ("topic", _STR), ("status", _STR), ("count", _LONG), ("revised", _LONG)
)
# The run-partitioned tables reconcile writes a partition of.
RUN_TABLES = ("detail", "summary", "ledger")
HELD = struct(("consumer", _STR), ("topic", _STR), ("range_from", _LONG), ("range_to", _LONG))
DUE = struct(("consumer", _STR), ("topic", _STR), ("seq", _LONG))


def build_parser():
    parser = job_parser("reconcile", "Judge each (consumer, topic) window against PostgreSQL.")
    parser.add_argument("--work", required=True, help="the warehouse root")
    parser.add_argument(
        "--full",
        action="store_true",
        help="audit mode: re-judge all history, compare, change nothing",
    )
    add_database(parser, partitions=True)
    return parser


@dataclasses.dataclass(frozen=True)
class Held:
    """What reconcile holds on the driver, computed once: small (one row per consumer and topic,
    one per range) and used several times."""

    scope: DataFrame  # each window capped at its topic's head, read now
    scope_rows: list[dict]
    heads: dict[str, int]
    signalled: DataFrame  # the ranges the consumers were told they lost
    signalled_rows: list
    rewound_rows: list  # the landed ``rewound`` frames' ranges (evidence of a rewind)


def held_locally(
    spark: SparkSession,
    deliveries: DataFrame,
    heads_of: Callable[[list[str]], dict[str, int]],
    progress_rows: list | None = None,
) -> Held:
    """Scope, heads (read by ``heads_of``), signalled ranges and rewound frames."""
    prior = None if progress_rows is None else local_rows.frame(spark, progress_rows, PROGRESS)
    uncapped = consumer_scope(deliveries, prior).collect()
    heads = heads_of(sorted({r["topic"] for r in uncapped}))
    rows = [dict(zip(SCOPE.names, r)) for r in rewind.cap_scope(uncapped, heads)]
    scope = local_rows.frame(spark, [tuple(r.values()) for r in rows], SCOPE)
    signalled_rows, rewound_rows = told_ranges(deliveries)
    signalled = local_rows.frame(spark, signalled_rows, SIGNALLED)
    return Held(scope, rows, heads, signalled, signalled_rows, rewound_rows)


def told_ranges(deliveries: DataFrame) -> tuple[list[Row], list[Row]]:
    """The signalled ranges and the landed ``rewound`` frames' ranges (both ``SIGNALLED``
    rows), read by one Spark job: the two are tagged, unioned and collected together."""
    told = signalled_ranges(deliveries).withColumn("told", F.lit("signalled"))
    frames = rewound_frames(deliveries).withColumn("told", F.lit("rewound"))
    out: dict[str, list[Row]] = {"signalled": [], "rewound": []}
    for r in told.unionByName(frames).collect():
        out[r["told"]].append(Row(**{name: r[name] for name in SIGNALLED.names}))
    return out["signalled"], out["rewound"]


def windows_of(scope_rows: list) -> list[jdbc.Window]:
    """Per topic, the union of its scopes' windows: what PostgreSQL is asked for."""
    out: dict[str, tuple[int, int]] = {}
    for r in scope_rows:
        if r["lo"] is None or r["watermark"] is None or r["watermark"] <= r["lo"]:
            continue
        lo, hi = out.get(r["topic"], (r["lo"], r["watermark"]))
        out[r["topic"]] = (min(lo, r["lo"]), max(hi, r["watermark"]))
    return [(t, lo, hi) for t, (lo, hi) in out.items()]


def window_seqs(windows: list[jdbc.Window]) -> int:
    """How many seqs the windows span (an upper bound of the source rows they hold)."""
    return sum(hi - lo for _, lo, hi in windows)


def _ledger(warehouse: Warehouse, committed: set[str], pin: bool = False) -> DataFrame:
    """Committed runs' ledger rows and the pruned runs' (``tables.PRUNED_LEDGER``; a crashed
    run's rows, never committed, are ignored); ``pin``: as the table is now
    (``Warehouse.pinned``), for a frame cached across this run's own ledger write."""
    runs_ = [*sorted(committed - {warehouse.layout.run_id}), tables.PRUNED_LEDGER]
    return conform(warehouse.runs_rows("ledger", runs_, pin=pin), LEDGER)


def _late(
    spark: SparkSession,
    warehouse: Warehouse,
    late: DataFrame,
    spans: list[jdbc.Window],
    heads: dict[str, int],
    target: jdbc.JdbcTarget,
    through: int,
    committed: set[str],
    rewound: DataFrame | None,
):
    """Late copies and copies above the head, judged against their seqs' current verdicts;
    the source is read up to the head only (above it nothing is the source's yet)."""
    capped = [(t, lo, min(hi, heads.get(t, 0))) for t, lo, hi in spans]
    capped = [(t, lo, hi) for t, lo, hi in capped if hi > lo]
    records = jdbc.read_records_in(spark, target, capped, 1)
    gaps = jdbc.read_gaps_in(spark, target, capped)
    pairs = late.select("consumer", "topic").distinct()
    ledger = _ledger(warehouse, committed, pin=True).join(  # rejudge caches what reads it
        pairs, on=["consumer", "topic"], how="left_semi"
    )
    return rejudge(late, ledger, records, gaps, through, rewound)


def _rewound_rows(scope_rows: list, found: evidence.Rewinds) -> list[tuple]:
    """``source_rewound`` deltas: per (consumer, topic) judged now, the topic's rewound seqs."""
    counts = rewind.seqs_in(found.reported)
    return [
        (r["consumer"], r["topic"], st.SOURCE_REWOUND, counts[r["topic"]], 0)
        for r in scope_rows
        if r["topic"] in counts
    ]


@step_cache.releases_cache
def run(
    spark: SparkSession,
    args,
    hook: Callable[[str], None] | None = None,
    warehouse: Warehouse | None = None,
    quick: bool = True,
) -> dict:
    """Judge the windows; returns the step's figures. ``hook(point)`` is called just before
    the PostgreSQL commit (tests kill the step there). ``warehouse``: the runner's (default:
    attached from ``--work`` and ``--run-id``). Plans run interpreted over few delivery rows
    (``plan_size``). ``quick``: a run with no new delivery batch is judged without Spark
    (``_nothing_delivered``); False judges it as any other (tests compare the two)."""
    timer = progress.Timer()
    pipeline_url = store.pipeline_url(args)
    wh = warehouse or Warehouse.attach(spark, Layout("", args.work, args.run_id), pipeline_url)
    prior = _prior(wh, args)
    if quick and not args.full:
        figures = _nothing_delivered(spark, args, hook, wh, timer, prior)
        if figures is not None:
            return figures
    with plan_size.sized(spark, wh.batch_rows(*prior.batches)) as small:
        return _judge(spark, args, hook, wh, timer, prior, small)


@dataclasses.dataclass(frozen=True)
class Prior:
    """What a run starts from, read once (PostgreSQL's run tables, compact's newest commit):
    the last delivery batch reconciled and the newest one compact committed, the consumers'
    progress rows, the committed runs, their order, and the (consumer, topic)s with phantoms
    (none for ``--full``)."""

    last: int
    latest: int
    progress: list[tuple]
    committed: set[str]
    run_order: dict[str, tuple[int, Any]]
    phantoms: set[tuple[str, str]]
    batches: tuple[int, int]  # the delivery batches the run judges (every one, for --full)


def _prior(wh: Warehouse, args) -> Prior:
    house = wh.layout.catalog
    with store.connect(store.pipeline_url(args)) as conn:
        last, progress_rows = runs.reconcile_state(conn, house, args.run_id)
        committed = runs.committed_runs(conn, house)
        run_order = runs.run_order(conn, house)
        phantoms = (
            set()
            if args.full
            else {
                (c, t)
                for (c, t, status), n in runs.cumulative_summary(conn, house).items()
                if status == st.PHANTOM and n > 0
            }
        )
    latest = wh.compact_state()["batch"]
    if latest < last:
        raise errors.WarehouseError(
            f"PostgreSQL says delivery batches up to {last} were reconciled, but "
            f"{wh.layout.work} holds batches up to {latest} only: this is not the warehouse "
            "those runs used"
        )
    batches = (1, last) if args.full else (last + 1, latest)
    return Prior(last, latest, progress_rows, committed, run_order, phantoms, batches)


def _nothing_delivered(
    spark: SparkSession,
    args,
    hook: Callable[[str], None] | None,
    wh: Warehouse,
    timer: progress.Timer,
    prior: Prior,
) -> dict | None:
    """The run when no delivery batch came since the last reconciled one, without a Spark job;
    None where ``_judge`` must run. With no delivery there is no scope (every window, its
    head, its late copies and its phantom revisits come from the run's deliveries), so what is
    left to judge is the evidence of a rewind that needs none: the session cursors below their
    marks and the stored digests those point at (``evidence.find``, in PostgreSQL). Where that
    finds rewound seqs earlier windows judged (``rewind.held``: late copies to judge again),
    or an earlier attempt of the run left rows in its partitions, ``_judge`` runs. Otherwise
    ``_judge`` would only overwrite the run's empty partitions with no rows (a commit that
    changes no row): this writes what it writes to PostgreSQL and the same figures."""
    if prior.latest != prior.last or any(wh.holds_run(n, args.run_id) for n in RUN_TABLES):
        return None
    rewind_timer = progress.Timer()
    with (
        store.connect(store.pipeline_url(args)) as conn,
        store.connect(args.database_url) as source,
    ):
        found = evidence.find(
            spark,
            conn,
            source,
            wh,
            jdbc.jdbc_target(args.database_url),
            {},
            [],
            [],
            prior.run_order,
            [],
            {r[1] for r in prior.progress},
        )
    if rewind.held(prior.progress, found.ranges):
        return None
    counts = {"batches": list(prior.batches), "scopes": 0, "seqs": 0, "defects": 0}
    return _commit(args, hook, wh, timer, found, Judged(counts, rewind_timer.seconds))


def _judge(
    spark: SparkSession,
    args,
    hook: Callable[[str], None] | None,
    wh: Warehouse,
    timer: progress.Timer,
    prior: Prior,
    small: bool = False,
) -> dict:
    """``small``: the run's delivery rows are few (``plan_size``), so they are cached once
    instead of scanned by each of the four jobs that read them (the scope, the told ranges,
    the late copies' runs and the judging write each planned an Iceberg scan of their own)."""
    pipeline_url = store.pipeline_url(args)
    layout = wh.layout
    house = layout.catalog
    progress_rows, committed, run_order, phantoms = (
        prior.progress,
        prior.committed,
        prior.run_order,
        prior.phantoms,
    )
    first, through = prior.batches
    detail_table, summary_table = (
        ("audit_detail", "audit_summary") if args.full else ("detail", "summary")
    )
    every = conform(wh.read("deliveries"), DELIVERIES_BATCH)
    deliveries = conform(every.filter(F.col("batch").between(first, through)), DELIVERIES)
    if small:
        deliveries = step_cache.cache(deliveries)

    def heads_of(topics: list[str]) -> dict[str, int]:
        with store.connect(args.database_url) as conn:
            return runs.source_heads(conn, topics)

    driver = held_locally(spark, deliveries, heads_of, None if args.full else progress_rows)
    scope, signalled, scope_rows, heads = (
        driver.scope,
        driver.signalled,
        driver.scope_rows,
        driver.heads,
    )
    target = jdbc.jdbc_target(args.database_url)
    late = step_cache.cache(late_copies(deliveries, scope))
    late_runs = [(r["topic"], r["lo"], r["hi"]) for r in seq_runs(late).collect()]
    rewind_timer = progress.Timer()  # what the rewind checks add to a run
    found = evidence.Rewinds({}, [], 0)
    unknown: list[str] = []
    if not args.full:
        with (
            store.connect(pipeline_url) as conn,
            store.connect(args.database_url) as source,
        ):
            found = evidence.find(
                spark,
                conn,
                source,
                wh,
                target,
                heads,
                late_runs,
                driver.signalled_rows,
                run_order,
                driver.rewound_rows,
                set(heads) | {r[1] for r in progress_rows},
            )
        if (
            prior.latest > prior.last + 1
        ):  # batches no committed run read: did PostgreSQL forget runs?
            unknown = evidence.unknown_runs(wh, committed)
    # The ledger is read for a phantom revisit only where a phantom verdict stands.
    due_rows = []
    if any((r["consumer"], r["topic"]) in phantoms for r in scope_rows):
        due_rows = phantoms_due(_ledger(wh, committed), scope).collect()
    due = local_rows.frame(spark, due_rows, DUE) if due_rows else None
    rewind_seconds = rewind_timer.seconds
    judged_deliveries = deliveries
    if due is not None:
        history = every.filter(F.col("batch") < first)
        judged_deliveries = deliveries.unionByName(
            conform(earlier_copies(history, due), DELIVERIES)
        )
    windows = windows_of(scope_rows)
    records = step_cache.cache(
        jdbc.read_records_in(
            spark, target, windows, plan_size.partitions(window_seqs(windows), args.num_partitions)
        )
    )
    # The gaps rows are ranges (retention extends a topic's row while it stays contiguous):
    # read once, held on the driver, and the judging plan leaves out its gap side when the
    # windows meet none (the usual run), instead of reading them at each of their three uses.
    gap_rows = jdbc.read_gaps_in(spark, target, windows).collect()
    gaps = local_rows.frame(spark, gap_rows, GAPS)
    kept = (
        remembered(evidence.earlier_verdicts(spark, wh, run_order), gaps, scope)
        if args.full
        else None
    )
    wh.replace_run(
        detail_table,
        args.run_id,
        reconcile(judged_deliveries, records, gaps if gap_rows else None, scope, signalled, kept),
    )
    # Pinned: the late copies' rows are appended to the same partition below.
    judged = wh.snapshot(detail_table)
    window_detail = conform(wh.run_rows(detail_table, args.run_id, judged), DETAIL)
    summary = summarize(window_detail, args.run_id)
    ledger_rows = conform(
        window_detail.filter(F.col("status") != st.DELIVERED).withColumn(
            "judged_batch", F.lit(through)
        ),
        LEDGER,
    )
    deltas: list[DataFrame] = []
    if due is not None:
        revised_ledger, revised = revisions(window_detail, due, through)
        ledger_rows = ledger_rows.unionByName(revised_ledger)
        deltas.append(revised)
    if found.reported:
        deltas.append(local_rows.frame(spark, _rewound_rows(scope_rows, found), DELTAS))
    held = [] if args.full else rewind.held(progress_rows, found.ranges)
    judged_late, spans = late, late_runs
    if held:
        judged_late = held_copies(local_rows.frame(spark, held, HELD), late)
        spans = late_runs + [(t, a - 1, b) for _, t, a, b in held]
        # A topic only the held seqs bring (no delivery to it in this run) has no head read
        # yet: without one its held copies would count as above the head (phantom).
        heads = {**heads_of(sorted({t for _, t, _, _ in held} - set(heads))), **heads}
    has_late = bool(held or late_runs)
    if has_late:
        late_detail, late_ledger, late_deltas = _late(
            spark,
            wh,
            judged_late,
            spans,
            heads,
            target,
            through,
            set() if args.full else committed,
            found.frame(spark),
        )
        deltas.append(late_deltas)
        ledger_rows = ledger_rows.unionByName(late_ledger)
        wh.append(
            detail_table,
            late_detail.withColumn("run_id", F.lit(args.run_id)),
            {tables.RUN_PROPERTY: args.run_id, tables.STEP_PROPERTY: "reconcile.late"},
        )
    for delta in deltas:
        summary = merge_summary(summary, delta, args.run_id)
    # Computed once on the driver (a row per consumer, topic and status), then written: the
    # table is not read back.
    summary_rows = summary.collect()
    wh.replace_run(summary_table, args.run_id, local_rows.frame(spark, summary_rows, SUMMARY))
    net: dict[str, int] = {}
    for r in summary_rows:
        net[r["status"]] = net.get(r["status"], 0) + r["count"] - r["revised"]
    counts = {
        "batches": [first, through],
        "scopes": len(scope_rows),
        "seqs": sum(v for k, v in net.items() if k not in st.EVENT_STATUSES),
        "defects": sum(net.get(k, 0) for k in st.DEFECTS),
        **net,
    }
    if args.full:
        records.unpersist()
        return {"seconds": timer.seconds, **counts, **_compare(args, house, summary_rows)}
    wh.replace_run("ledger", args.run_id, ledger_rows)
    repairs_open = _repairs_open(wh, args.run_id, summary_rows, has_late)
    windows_rows = [
        (
            r["consumer"],
            r["topic"],
            r["start_seq"],
            r["lo"],
            max(r["lo"], r["watermark"]),
            r["filter_node"],
        )
        for r in scope_rows
        if r["start_seq"] is not None and r["watermark"] is not None
    ]
    digest_timer = progress.Timer()
    digests = (
        [
            (r["topic"], r["seq_from"], r["seq_to"], r["digest"])
            for r in rewind.range_digests(records).collect()
        ]
        if windows
        else []
    )
    records.unpersist()
    outcome = Judged(
        counts,
        rewind_seconds,
        digest_timer.seconds,
        has_late,
        repairs_open,
        windows_rows,
        [(r["consumer"], r["topic"], r["status"], r["count"], r["revised"]) for r in summary_rows],
        digests,
        unknown,
    )
    return _commit(args, hook, wh, timer, found, outcome)


@dataclasses.dataclass(frozen=True)
class Judged:
    """What a run judged, for ``_commit``: its counts and timings, and the rows it commits to
    PostgreSQL beside what the rewind evidence found (none for a run with no delivery)."""

    counts: dict
    rewind_seconds: float
    digest_seconds: float = 0.0
    late: bool = False
    repairs_open: bool = False
    windows: list = dataclasses.field(default_factory=list)
    summary: list = dataclasses.field(default_factory=list)
    digests: list = dataclasses.field(default_factory=list)
    unknown: list = dataclasses.field(default_factory=list)


def _commit(
    args,
    hook: Callable[[str], None] | None,
    wh: Warehouse,
    timer: progress.Timer,
    found,
    judged: Judged,
) -> dict:
    """The run's reconcile state committed to PostgreSQL in one transaction (its batches,
    windows, summary, digests and session marks), then its figures and snapshots recorded:
    the same for a run judged through Spark and for one with no delivery."""
    house = wh.layout.catalog
    if hook:
        hook("reconcile.committing")
    with store.connect(store.pipeline_url(args), transaction=True) as conn:
        runs.commit_reconcile(
            conn,
            house,
            args.run_id,
            tuple(judged.counts["batches"]),
            judged.repairs_open,
            judged.windows,
            judged.summary,
        )
        runs.store_digests(conn, house, args.run_id, found.digests + judged.digests)
        session_marks.replace(conn, house, args.run_id, found.sessions)
    figures = {
        "seconds": timer.seconds,
        **judged.counts,
        "late": judged.late,
        "rewound": {t: [list(r) for r in rs] for t, rs in found.reported.items()},
        "rewind_checks": {
            "ranges": found.checked,
            "seconds": round(judged.rewind_seconds + judged.digest_seconds, 3),
            "digests_seconds": judged.digest_seconds,
            "sessions": len({s.wid for s in found.sessions}),
        },
        "cursors_went_back": [list(b) for b in found.went_back],
        "runs_unknown_to_postgres": judged.unknown,
    }
    store.record_step(args, "reconcile", figures)
    store.record_snapshots(args, wh, RUN_TABLES)
    return figures


def _repairs_open(warehouse: Warehouse, run_id: str, summary_rows: list, has_late: bool) -> bool:
    """Whether the run's detail holds a repairable verdict with a source hash. Without late
    copies the detail is the window's, every row of which the summary counts under its status:
    no repairable status there, no such row, and the table is not read."""
    if not has_late and not any(r["status"] in st.REPAIRABLE for r in summary_rows):
        return False
    detail = warehouse.run_rows("detail", run_id)
    wanted = F.col("status").isin(*st.REPAIRABLE) & F.col("source_hash").isNotNull()
    return detail.filter(wanted).limit(1).count() > 0


def _compare(args, house: str, summary_rows: list) -> dict:
    full = {
        (r["consumer"], r["topic"], r["status"]): r["count"] - r["revised"]
        for r in summary_rows
        if r["count"] - r["revised"]
    }
    with store.connect(store.pipeline_url(args)) as conn:
        incremental = {
            k: n
            for k, n in runs.cumulative_summary(conn, house).items()
            if k[2] != st.SOURCE_REWOUND
        }
    keys = sorted(set(full) | set(incremental))
    differences = [
        (k, incremental.get(k, 0), full.get(k, 0))
        for k in keys
        if incremental.get(k, 0) != full.get(k, 0)
    ]
    return {
        "agree": not differences,
        "differences": [
            f"{c}/{t}/{s}: incremental {i}, full {f}" for (c, t, s), i, f in differences[:20]
        ],
    }


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    progress.configure()
    spark = build_session("auditsync-reconcile", args.master)
    figures = run(spark, args)
    progress.emit("reconcile", figures["seconds"], figures)
    stop_session(spark)
    return 0 if figures.get("agree", True) else 1


if __name__ == "__main__":
    sys.exit(main())
