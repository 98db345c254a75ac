"""Run in a subprocess by test_dagbag.py: parse the project's DAGs and load its plugin with
every network connection refused, then print what happened as one JSON line."""

from __future__ import annotations

import json
import socket
import sys
import time

attempts: list[str] = []
_connect = socket.socket.connect


def _refuse(self, address):  # any network use during parsing is a bug in a DAG file
    if self.family != socket.AF_UNIX:
        attempts.append(repr(address))
        raise OSError(f"network access during DAG parsing: {address!r}")
    return _connect(self, address)


socket.socket.connect = _refuse

from airflow import plugins_manager  # noqa: E402
from airflow.dag_processing.dagbag import DagBag  # noqa: E402

heavy_before = {
    m for m in ("pyspark", "great_expectations", "psycopg", "fastapi") if m in sys.modules
}
started = time.perf_counter()
bag = DagBag(dag_folder=sys.argv[1])
parse_s = time.perf_counter() - started
heavy = sorted({m for m in ("pyspark", "great_expectations") if m in sys.modules} - heavy_before)
plugins, plugin_errors = plugins_manager._get_plugins()
dag = bag.dags.get("audit_sync")
maint = bag.dags.get("maintenance")
print(
    json.dumps(
        {
            "dags": sorted(bag.dags),
            "import_errors": {str(k): v for k, v in bag.import_errors.items()},
            "parse_s": parse_s,
            "heavy_imports": heavy,
            "network_attempts": attempts,
            "plugins": sorted(p.name for p in plugins),
            "plugin_errors": plugin_errors,
            "fastapi_imported_by_plugin_load": "fastapi.applications" in sys.modules,
            "tasks": {t.task_id: sorted(t.downstream_task_ids) for t in dag.tasks} if dag else {},
            "teardowns": sorted(t.task_id for t in dag.tasks if t.is_teardown) if dag else [],
            "catchup": dag.catchup if dag else None,
            "doc_md": bool(dag and dag.doc_md),
            "schedule": [type(dag.timetable).__name__, dag.timetable.expression] if dag else None,
            "spark": {
                t.task_id: [t._conn_id, t._spark_binary, t.jars]
                for t in dag.tasks
                if "SparkSubmitOperator" in {c.__name__ for c in type(t).__mro__}
            }
            if dag
            else {},
            "spark_argv": {
                t.task_id: list(t.application_args)
                for t in dag.tasks
                if hasattr(t, "application_args")
            }
            if dag
            else {},
            "spark_env": {t.task_id: t.env_vars for t in dag.tasks if hasattr(t, "env_vars")}
            if dag
            else {},
            "outlets": sorted(a.name for t in dag.tasks for a in t.outlets) if dag else [],
            "deadline": [
                [type(d.reference).__name__, d.interval.total_seconds(), d.callback.path]
                for d in (dag.deadline or [])
            ]
            if dag
            else [],
            "retries": {t.task_id: [t.retries, type(t.retry_policy).__name__] for t in dag.tasks}
            if dag
            else {},
            "callbacks": {
                t.task_id: sorted(
                    f"{name}:{type(cb).__name__}"
                    for name in ("on_success_callback", "on_failure_callback")
                    for cb in (getattr(t, name, None) or [])
                )
                for t in dag.tasks
            }
            if dag
            else {},
            "maintenance": {
                "schedule": str(maint.schedule),
                "tasks": {
                    t.task_id: [type(t).__name__, t.step, list(t.application_args)]
                    if hasattr(t, "step")
                    else [type(t).__name__, *(getattr(t, f) for f in t.template_fields)]
                    for t in maint.tasks
                },
                "downstream": {t.task_id: sorted(t.downstream_task_ids) for t in maint.tasks},
                "env": {t.task_id: t.env_vars for t in maint.tasks if hasattr(t, "env_vars")},
            }
            if maint
            else None,
        }
    )
)
