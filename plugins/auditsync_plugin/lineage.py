"""What each Spark step reads and writes, named as OpenLineage and Airflow's Assets name it.

One rule for both, so lineage and data-aware scheduling agree:

- an Iceberg table of the warehouse is namespace ``iceberg://<catalog>`` and name
  ``<namespace>.<table>`` (``iceberg://wh_1a2b…/audit.audit_log``): the catalog is the one the
  steps attach (``spark_jobs.warehouse.layout.Layout.catalog``, derived from the warehouse's
  location), the rest is the table's name in it. Its Asset URI is the same text, and the provider
  registers the ``iceberg`` scheme with :func:`asset_to_openlineage` as its converter;
- the landing zone is a location, named as OpenLineage names files and objects: namespace
  ``file`` and the absolute path, or ``s3://<bucket>`` and the key prefix;
- a table of the source PostgreSQL is ``postgres://<host>:<port>`` and
  ``<database>.public.<table>`` (the postgres provider's rule; no user or password).

Pure: the step's rendered ``application_args`` and database URL in, :class:`StepIO` out.
Only :func:`operator_lineage` and the converter import OpenLineage's classes.
"""

from __future__ import annotations

import dataclasses
import itertools
import urllib.parse
from collections.abc import Sequence
from typing import Any

from spark_jobs.warehouse.layout import TABLES, Layout
from watch_service.protocol.landing import COLUMNS
from watch_service.storage import Location

ICEBERG_SCHEME = "iceberg"
SOURCE_SCHEMA = "public"
# The source tables a step reads over JDBC or writes with the sink's own statement.
RECORDS, GAPS, SEARCH_INDEX = "records", "gaps", "search_documents"


@dataclasses.dataclass(frozen=True)
class Dataset:
    namespace: str
    name: str

    @property
    def uri(self) -> str:
        """The Asset URI naming the same dataset (the postgres provider's is
        ``postgres://host:port/database/schema/table``)."""
        if self.namespace.startswith("postgres://"):
            return f"{self.namespace}/{self.name.replace('.', '/')}"
        return f"{self.namespace}/{self.name}"


@dataclasses.dataclass(frozen=True)
class StepIO:
    inputs: tuple[Dataset, ...]
    outputs: tuple[Dataset, ...]
    # output dataset -> the input whose columns it copies by name (compact: the landing rows)
    copies_columns: tuple[tuple[Dataset, Dataset], ...] = ()


def iceberg_table(warehouse: str, table: str) -> Dataset:
    catalog, name = Layout("", warehouse, "").dataset(table)
    return Dataset(f"{ICEBERG_SCHEME}://{catalog}", name)


def location(text: str) -> Dataset:
    place = Location.parse(text)
    if place.is_local:
        return Dataset("file", place.path)
    return Dataset(f"s3://{place.bucket}", place.path or "/")


def source_table(database_url: str | None, table: str) -> Dataset | None:
    """A table of the source PostgreSQL; None when the step was given no URL."""
    if not database_url:
        return None
    parts = urllib.parse.urlsplit(database_url)
    database = parts.path.lstrip("/") or "postgres"
    return Dataset(
        f"postgres://{parts.hostname or 'localhost'}:{parts.port or 5432}",
        f"{database}.{SOURCE_SCHEMA}.{table}",
    )


def _flags(argv: Sequence[str]) -> dict[str, list[str]]:
    """``--flag value`` pairs of a step's arguments (a repeated flag keeps every value)."""
    out: dict[str, list[str]] = {}
    for flag, value in itertools.pairwise(argv):
        if flag.startswith("--") and not value.startswith("--"):
            out.setdefault(flag, []).append(value)
    return out


def step_io(step: str, argv: Sequence[str], database_url: str | None = None) -> StepIO:
    """The datasets step ``step`` reads and writes when run with ``argv`` (its ``main.py``
    flags as the DAG renders them). The pipeline's own bookkeeping (run tables, digests,
    windows) is no dataset: it says how far the steps got, not what they hold."""
    flags = _flags([str(a) for a in argv])
    warehouse = (flags.get("--work") or [""])[0]
    if not warehouse:
        raise ValueError(f"{step}: no --work in {list(argv)}")

    def table(name: str) -> Dataset:
        return iceberg_table(warehouse, name)

    def source(*names: str) -> tuple[Dataset, ...]:
        found = (source_table(database_url, n) for n in names)
        return tuple(d for d in found if d is not None)

    if step == "compact":
        landing = location(flags["--landing"][0])
        return StepIO((landing,), (table("deliveries"),), ((table("deliveries"), landing),))
    if step == "reconcile":
        return StepIO(
            (table("deliveries"), table("ledger"), *source(RECORDS, GAPS)),
            (table("detail"), table("summary"), table("ledger")),
        )
    if step == "backfill":
        target = (flags.get("--target") or ["both"])[0]
        inputs: list[Dataset] = [table("detail"), *source(RECORDS)]
        outputs: list[Dataset] = []
        if target in ("both", "audit_log"):
            inputs.insert(1, table("deliveries"))
            outputs.append(table("audit_log"))
        if target in ("both", "search_index"):
            outputs.extend(source(SEARCH_INDEX))
        return StepIO(tuple(inputs), tuple(outputs))
    if step == "verify":
        # the defects left, then the search index checked against the source and put right,
        # then the signed log of each topic under <warehouse>/tlog
        index = source(SEARCH_INDEX)
        tlog = location(Location.parse(warehouse).uri.rstrip("/") + "/tlog")
        return StepIO(
            (table("detail"), table("audit_log"), *source(RECORDS), *index),
            (table("remaining"), *index, tlog),
        )
    if step == "maintenance":
        # compaction, snapshot expiry and orphan removal rewrite each table in place
        chosen = tuple(table(n) for n in (flags.get("--table") or TABLES))
        return StepIO(chosen, chosen)
    raise ValueError(f"unknown Spark step {step!r}")


# What a passed run publishes: the audit log, the reconciliation's verdicts and counts.
PUBLISHED_TABLES = ("audit_log", "detail", "summary")


def published(warehouse: str, database_url: str | None) -> tuple[Dataset, ...]:
    """The datasets a passed run's asset events name: its warehouse's published tables and
    the search index."""
    tables = tuple(iceberg_table(warehouse, t) for t in PUBLISHED_TABLES)
    index = source_table(database_url, SEARCH_INDEX)
    return (*tables, *([index] if index else []))


def asset_to_openlineage(asset: Any, lineage_context: Any = None) -> Any:
    """The provider's converter of ``iceberg://<catalog>/<namespace>.<table>`` Assets."""
    from openlineage.client.event_v2 import Dataset as OLDataset

    parts = urllib.parse.urlsplit(asset.uri)
    return OLDataset(namespace=f"{parts.scheme}://{parts.netloc}", name=parts.path.lstrip("/"))


def sanitize_uri(uri: urllib.parse.SplitResult) -> urllib.parse.SplitResult:
    """Airflow's check of an ``iceberg://`` Asset URI: a catalog and ``<namespace>.<table>``."""
    name = uri.path.lstrip("/")
    if not uri.netloc or name.count(".") != 1 or "/" in name:
        raise ValueError(
            f"iceberg asset URI {uri.geturl()!r}: expected iceberg://<catalog>/<namespace>.<table>"
        )
    return uri


def operator_lineage(io: StepIO) -> Any:
    """``io`` as the openlineage provider's ``OperatorLineage``, with the landing rows' schema
    and the column-level facet of what copies them."""
    from airflow.providers.openlineage.extractors import OperatorLineage
    from openlineage.client.event_v2 import InputDataset, OutputDataset
    from openlineage.client.facet_v2 import column_lineage_dataset as cl
    from openlineage.client.facet_v2 import schema_dataset

    landing_schema = schema_dataset.SchemaDatasetFacet(
        fields=[schema_dataset.SchemaDatasetFacetFields(name=n, type=t) for n, t in COLUMNS]
    )
    copied = dict(io.copies_columns)
    sources = {src for _, src in io.copies_columns}

    def facets_in(d: Dataset) -> dict[str, Any]:
        return {"schema": landing_schema} if d in sources else {}

    def facets_out(d: Dataset) -> dict[str, Any]:
        src = copied.get(d)
        if src is None:
            return {}
        same = cl.Transformation(type="DIRECT", subtype="IDENTITY")
        fields = {
            n: cl.Fields(
                inputFields=[
                    cl.InputField(
                        namespace=src.namespace, name=src.name, field=n, transformations=[same]
                    )
                ],
                transformationDescription="",
                transformationType="IDENTITY",
            )
            for n, _ in COLUMNS
        }
        return {"columnLineage": cl.ColumnLineageDatasetFacet(fields=fields)}

    return OperatorLineage(
        inputs=[
            InputDataset(namespace=d.namespace, name=d.name, facets=facets_in(d)) for d in io.inputs
        ],
        outputs=[
            OutputDataset(namespace=d.namespace, name=d.name, facets=facets_out(d))
            for d in io.outputs
        ],
    )
