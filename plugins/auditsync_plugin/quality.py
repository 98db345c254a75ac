"""Great Expectations suites over the pipeline's outputs, built in code, and the checkpoint run.

Datasets (each handed in by the operator: a pandas DataFrame when the run's slice is small, the
usual case, else a Spark DataFrame; the same suites run on either, through GX's pandas or Spark
execution engine):

* ``deliveries`` — the compacted landing zone, one row per delivered frame item;
* ``detail`` — the run's reconcile verdicts, per (consumer, topic, seq or seq range);
* ``reconciliation`` — the run's per (consumer, topic, status) counts;
* ``remaining`` — defects left after backfill (verify's output, one row per seq): none;
* ``audit_log`` — the repaired audit log: ``(topic, seq)`` unique, no nulls where a record
  must have values, timestamps in range.

The context keeps suites, checkpoints and validation definitions in memory: they are declared
with ``add_or_update`` each run, so the code here is the only definition. What outlives a run,
the validation results and the Data Docs site, is written under the ``root`` location (a path,
``file://…`` or ``s3://…``; ``docs_site`` names the folders) through ``gx_store``, so the worker
that validates and the API server that serves the pages share no disk. One checkpoint per
dataset (a dataframe checkpoint validates the one dataframe it is given).

The Data Docs are built once per run, after every dataset is validated: the run's pages, then
the index. The index lists the newest ``INDEX_RESULTS`` validation results (the site builder
reads each result it lists, so an index of every result would cost each run a read per result
ever stored); older results keep their pages. GX's ``UpdateDataDocsAction`` per checkpoint
rebuilt the index once per dataset, each time reading every result in the store.

This module imports Great Expectations at the top: only the operator's ``execute`` imports it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import great_expectations as gx
import great_expectations.expectations as gxe
from great_expectations.core.run_identifier import RunIdentifier
from great_expectations.data_context.types.base import DataContextConfig, ProgressBarsConfig
from great_expectations.data_context.types.resource_identifiers import ExpectationSuiteIdentifier
from great_expectations.expectations.row_conditions import Column

from watch_service.protocol.landing import KINDS as RECORD_KINDS
from watch_service.protocol.landing import NOT_NULL as LANDING_NOT_NULL

from . import docs_site, gx_store

DATASOURCE = "auditsync"
PANDAS_DATASOURCE = "auditsync_pandas"
DOCS_SITE = docs_site.SITE_NAME
MIN_TS_MS = 1_577_836_800_000  # 2020-01-01: nothing in this log is older
# The Data Docs index lists this many of the newest validation results: 100 runs of 5 datasets.
INDEX_RESULTS = 500


@dataclasses.dataclass(frozen=True)
class Bounds:
    """Timestamps (ms) a row may carry: from MIN_TS_MS to when the check runs, plus slack."""

    max_ts_ms: int
    min_ts_ms: int = MIN_TS_MS


def _not_null(*cols: str, **kw: Any) -> list:
    return [gxe.ExpectColumnValuesToNotBeNull(column=c, **kw) for c in cols]


def suites(
    bounds: Bounds,
    summary_statuses: tuple[str, ...],
    defects: tuple[str, ...],
    origins: tuple[str, ...],
) -> dict[str, list]:
    """Expectations per dataset. Statuses and origins come from ``spark_jobs.common.statuses``."""
    is_record = Column("kind") == "record"
    ts_range: dict[str, Any] = {"min_value": bounds.min_ts_ms, "max_value": bounds.max_ts_ms}
    return {
        "deliveries": [
            *_not_null(*sorted(LANDING_NOT_NULL)),
            gxe.ExpectColumnValuesToBeInSet(column="kind", value_set=list(RECORD_KINDS)),
            *_not_null("seq", "ts", "data", "data_sha256", row_condition=is_record),
            gxe.ExpectColumnValuesToBeBetween(column="seq", min_value=1, row_condition=is_record),
            gxe.ExpectColumnValuesToBeBetween(column="received_ms", **ts_range),
            gxe.ExpectColumnValuesToBeBetween(column="ts", row_condition=is_record, **ts_range),
        ],
        "detail": [
            *_not_null("consumer", "topic", "seq", "status"),
            gxe.ExpectColumnValuesToBeInSet(column="status", value_set=list(summary_statuses)),
            gxe.ExpectColumnValuesToBeBetween(column="seq", min_value=0),
        ],
        "reconciliation": [
            *_not_null("run_id", "consumer", "topic", "status", "count"),
            gxe.ExpectColumnValuesToBeInSet(column="status", value_set=list(summary_statuses)),
            gxe.ExpectColumnValuesToBeBetween(column="count", min_value=0),
            gxe.ExpectCompoundColumnsToBeUnique(
                column_list=["run_id", "consumer", "topic", "status"]
            ),
        ],
        "remaining": [
            # verify's output: one row per defect left after backfill. The gate: none may
            # survive (the failure lists which statuses did).
            gxe.ExpectColumnValuesToNotBeInSet(column="status", value_set=list(defects)),
            gxe.ExpectTableRowCountToEqual(value=0),
        ],
        "audit_log": [
            *_not_null("topic", "seq", "ts", "data", "data_sha256", "origin"),
            gxe.ExpectCompoundColumnsToBeUnique(column_list=["topic", "seq"]),
            gxe.ExpectColumnValuesToBeBetween(column="seq", min_value=1),
            gxe.ExpectColumnValuesToBeBetween(column="ts", **ts_range),
            gxe.ExpectColumnValuesToBeInSet(column="origin", value_set=list(origins)),
        ],
    }


def project_config(root: str) -> DataContextConfig:
    """Everything in memory but the validation results and the Data Docs site, which go to
    ``root`` (a location) through ``gx_store``; no progress bars in task logs, no usage
    statistics sent anywhere."""
    location = root.rstrip("/")

    def backend(rel: str) -> dict[str, str]:
        return {
            "module_name": gx_store.MODULE,
            "class_name": gx_store.CLASS,
            "location": f"{location}/{rel}",
        }

    memory = {"class_name": "InMemoryStoreBackend"}
    return DataContextConfig(
        stores={
            "expectations_store": {"class_name": "ExpectationsStore", "store_backend": memory},
            "validation_results_store": {
                "class_name": "ValidationResultsStore",
                "store_backend": backend(docs_site.VALIDATIONS),
            },
            "checkpoint_store": {"class_name": "CheckpointStore", "store_backend": memory},
            "validation_definition_store": {
                "class_name": "ValidationDefinitionStore",
                "store_backend": memory,
            },
        },
        expectations_store_name="expectations_store",
        validation_results_store_name="validation_results_store",
        checkpoint_store_name="checkpoint_store",
        data_docs_sites={
            DOCS_SITE: {
                "class_name": "SiteBuilder",
                "store_backend": backend(docs_site.SITE),
                "site_index_builder": {
                    "class_name": "DefaultSiteIndexBuilder",
                    "validation_results_limit": INDEX_RESULTS,
                },
            }
        },
        analytics_enabled=False,
        progress_bars=ProgressBarsConfig(globally=False, metric_calculations=False),
    )


def context(root: str):
    """The context whose lasting results are under the location ``root``."""
    return gx.get_context(project_config=project_config(str(root)), mode="ephemeral")


def docs_index(root: str) -> str:
    """Where the Data Docs' index page is (a path or a URI)."""
    return docs_site.site_storage(str(root)).uri(docs_site.INDEX)


def _is_pandas(frame: Any) -> bool:
    return type(frame).__module__.startswith("pandas")


def _checkpoint(ctx, name: str, expectations: list, pandas: bool):
    source_name = PANDAS_DATASOURCE if pandas else DATASOURCE
    try:
        source = ctx.data_sources.get(source_name)
    except (KeyError, ValueError):
        add = ctx.data_sources.add_pandas if pandas else ctx.data_sources.add_spark
        source = add(source_name)
    try:
        asset = source.get_asset(name)
    except LookupError:
        asset = source.add_dataframe_asset(name)
    try:
        batch = asset.get_batch_definition(name)
    except (KeyError, ValueError, LookupError):
        batch = asset.add_batch_definition_whole_dataframe(name)
    suite = ctx.suites.add_or_update(gx.ExpectationSuite(name=name, expectations=expectations))
    vd = ctx.validation_definitions.add_or_update(
        gx.ValidationDefinition(name=name, data=batch, suite=suite)
    )
    return ctx.checkpoints.add_or_update(
        gx.Checkpoint(
            name=f"audit_sync_{name}",
            validation_definitions=[vd],
            actions=[],  # the Data Docs are built once per run (see ``run``)
            result_format={"result_format": "SUMMARY", "partial_unexpected_count": 5},
        )
    )


def run(
    root: str,
    frames: Mapping[str, Any],
    run_name: str,
    bounds: Bounds,
    summary_statuses: tuple[str, ...],
    defects: tuple[str, ...],
    origins: tuple[str, ...],
) -> list[dict]:
    """Validate each given dataset (a pandas or a Spark DataFrame); returns each validation
    result as a JSON dict (what ``summary.summarize`` reads), once the Data Docs show them."""
    ctx = context(root)
    defined = suites(bounds, summary_statuses, defects, origins)
    results, pages = [], []
    for name, df in frames.items():
        checkpoint = _checkpoint(ctx, name, defined[name], _is_pandas(df))
        outcome = checkpoint.run(
            batch_parameters={"dataframe": df}, run_id=RunIdentifier(run_name=run_name)
        )
        for identifier, result in outcome.run_results.items():
            doc = result.to_json_dict()
            doc["dataset"] = name
            results.append(doc)
            pages += [identifier, ExpectationSuiteIdentifier(name=result.suite_name)]
    ctx.build_data_docs(site_names=[DOCS_SITE], resource_identifiers=pages, build_index=True)
    return results
