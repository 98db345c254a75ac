"""PostgreSQL over JDBC: URL conversion and seq-partitioned reads of ``records`` and ``gaps``.

``records.data`` and ``records.meta`` are PostgreSQL ``json`` columns; they are selected as
text (``data::text``) inside a subquery so Spark gets the exact stored bytes, whose SHA-256 is
the landing zone's ``data_sha256`` for a faithfully delivered record.

A partitioned read splits ``[min(seq), max(seq)]`` (from one quick bounds query, or from the
windows a windowed read names) into ``num_partitions`` strides; each becomes a ``WHERE seq >=
a AND seq < b`` query of its own. A read in one partition asks for no bounds.

Incremental runs read only their window: ``read_records_in``/``read_gaps_in`` put a
``WHERE (topic = '…' AND seq > lo AND seq <= hi) OR …`` per topic into the query text itself,
so PostgreSQL (with its (topic, seq) primary key) reads only those rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from urllib.parse import parse_qsl, unquote, urlsplit

from pyspark.sql import DataFrame, SparkSession

from spark_jobs.common import local_rows
from spark_jobs.warehouse.schemas import GAPS, SOURCE_RECORDS, conform

DRIVER = "org.postgresql.Driver"
FETCH_SIZE = 10_000

RECORDS_SQL = (
    "SELECT topic, seq, ts, tag, node, meta::text AS meta, data::text AS data FROM records"
)
GAPS_SQL = "SELECT topic, gap_from, gap_to, reason FROM gaps"


@dataclasses.dataclass(frozen=True)
class JdbcTarget:
    url: str  # jdbc:postgresql://host:port/db
    properties: dict[str, str]  # user, password, driver, and any URL query parameters


def jdbc_target(database_url: str) -> JdbcTarget:
    """``postgresql://user[:password]@host[:port]/db[?k=v]`` -> a JDBC URL and properties."""
    parts = urlsplit(database_url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise ValueError(f"database URL {database_url!r}: expected postgresql://user@host:port/db")
    host = parts.hostname or "localhost"
    if ":" in host:
        host = f"[{host}]"
    port = parts.port or 5432
    db = unquote(parts.path.lstrip("/")) or (unquote(parts.username or "") or "postgres")
    props = {"driver": DRIVER}
    if parts.username:
        props["user"] = unquote(parts.username)
    if parts.password:
        props["password"] = unquote(parts.password)
    props.update(dict(parse_qsl(parts.query)))
    return JdbcTarget(f"jdbc:postgresql://{host}:{port}/{db}", props)


def _reader(spark: SparkSession, target: JdbcTarget):
    reader = spark.read.format("jdbc").option("url", target.url).option("fetchsize", FETCH_SIZE)
    for key, value in target.properties.items():
        reader = reader.option(key, value)
    return reader


def bounds(
    spark: SparkSession, target: JdbcTarget, sql: str, column: str
) -> tuple[int, int] | None:
    """(min, max) of ``column`` over ``sql``'s rows; None when there are none."""
    query = f"SELECT min({column}) AS lo, max({column}) AS hi FROM ({sql}) AS b"
    row = _reader(spark, target).option("query", query).load().first()
    if row is None or row["lo"] is None:
        return None
    return int(row["lo"]), int(row["hi"])


def read_partitioned(
    spark: SparkSession,
    target: JdbcTarget,
    sql: str,
    column: str,
    num_partitions: int,
    span: tuple[int, int] | None = None,
) -> DataFrame:
    """``sql``'s rows, read in ``num_partitions`` parallel queries striding over ``column``
    between ``span`` (inclusive; default: asked of PostgreSQL, one Spark job). One partition
    asks nothing: the bounds only place the strides, and a row outside them is read all the
    same (the first and last strides are open)."""
    reader = _reader(spark, target).option("dbtable", f"({sql}) AS src")
    if num_partitions <= 1:
        return reader.load()
    if span is None:
        span = bounds(spark, target, sql, column)
    if span is not None and span[1] > span[0]:
        reader = (
            reader.option("partitionColumn", column)
            .option("lowerBound", span[0])
            .option("upperBound", span[1] + 1)
            .option("numPartitions", num_partitions)
        )
    return reader.load()


def read_records(spark: SparkSession, target: JdbcTarget, num_partitions: int = 4) -> DataFrame:
    """The ``records`` table, partitioned by seq, as ``SOURCE_RECORDS``."""
    return conform(
        read_partitioned(spark, target, RECORDS_SQL, "seq", num_partitions), SOURCE_RECORDS
    )


def read_gaps(spark: SparkSession, target: JdbcTarget, num_partitions: int = 1) -> DataFrame:
    """The ``gaps`` table (small), partitioned by gap_from, as ``GAPS``."""
    return conform(read_partitioned(spark, target, GAPS_SQL, "gap_from", num_partitions), GAPS)


# (topic, lo, hi): seqs lo < seq <= hi of topic.
Window = tuple[str, int, int]


def quote(text: str) -> str:
    """A PostgreSQL string literal (standard_conforming_strings, on since 9.1)."""
    if "\x00" in text:
        raise ValueError("a topic name cannot contain NUL")
    return "'" + text.replace("'", "''") + "'"


def windows_where(windows: Iterable[Window], first: str, last: str) -> str:
    """``WHERE`` text selecting rows whose ``[first, last]`` meets some window."""
    terms = [
        f"(topic = {quote(t)} AND {last} > {int(lo)} AND {first} <= {int(hi)})"
        for t, lo, hi in sorted(windows)
    ]
    return " WHERE " + (" OR ".join(terms) if terms else "false")


def read_records_in(
    spark: SparkSession, target: JdbcTarget, windows: list[Window], num_partitions: int = 4
) -> DataFrame:
    """The ``records`` inside ``windows`` only, partitioned by seq, as ``SOURCE_RECORDS``."""
    if not windows:
        return local_rows.empty(spark, SOURCE_RECORDS)
    sql = RECORDS_SQL + windows_where(windows, "seq", "seq")
    # The strides span the windows themselves: no bounds query (a Spark job) is needed.
    span = (min(lo for _, lo, _ in windows) + 1, max(hi for _, _, hi in windows))
    return conform(
        read_partitioned(spark, target, sql, "seq", num_partitions, span), SOURCE_RECORDS
    )


def read_gaps_in(spark: SparkSession, target: JdbcTarget, windows: list[Window]) -> DataFrame:
    """The ``gaps`` rows meeting ``windows``, as ``GAPS``."""
    if not windows:
        return local_rows.empty(spark, GAPS)
    sql = GAPS_SQL + windows_where(windows, "gap_from", "gap_to")
    return conform(read_partitioned(spark, target, sql, "gap_from", 1), GAPS)
