"""A Great Expectations result, as a person reads it in a task log or a failure message.

Pure: reads validation results in their JSON form (``ExpectationSuiteValidationResult
.to_json_dict()``), so it is tested on plain dicts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

_SHOWN_KWARGS = ("column", "column_list", "value_set", "value", "min_value", "max_value")


@dataclasses.dataclass(frozen=True)
class Failure:
    dataset: str
    expectation: str
    where: str
    unexpected: int | None
    total: int | None
    examples: tuple[Any, ...]
    error: str | None = None
    observed: Any = None

    def line(self) -> str:
        text = f"{self.dataset}: {self.expectation}({self.where})"
        if self.error:
            return f"{text} raised: {self.error}"
        if self.unexpected is not None:
            text += f": {self.unexpected} of {self.total} rows unexpected"
        elif self.observed is not None:
            text += f": observed {self.observed!r}"
        if self.examples:
            text += f", e.g. {', '.join(repr(e) for e in self.examples)}"
        return text


@dataclasses.dataclass(frozen=True)
class Summary:
    success: bool
    evaluated: int
    failed: tuple[Failure, ...]
    datasets: Mapping[str, tuple[int, int]]  # dataset -> (passed, evaluated)
    docs_url: str

    def text(self) -> str:
        head = "PASSED" if self.success else "FAILED"
        per = ", ".join(f"{name} {ok}/{n}" for name, (ok, n) in self.datasets.items())
        lines = [
            f"data quality {head}: {self.evaluated - len(self.failed)} of {self.evaluated} "
            f"expectations met ({per})"
        ]
        lines += [f"  - {f.line()}" for f in self.failed]
        lines.append(f"report: {self.docs_url}")
        return "\n".join(lines)


def _where(kwargs: Mapping[str, Any], row_condition: Any) -> str:
    parts = [f"{k}={kwargs[k]!r}" for k in _SHOWN_KWARGS if kwargs.get(k) is not None]
    if row_condition:
        parts.append(f"where {_condition_text(row_condition)}")
    return ", ".join(parts)


def _condition_text(cond: Any) -> str:
    if isinstance(cond, Mapping) and {"column", "operator", "parameter"} <= cond.keys():
        column = cond["column"]
        name = column.get("name") if isinstance(column, Mapping) else column
        return f"{name} {cond['operator']} {cond['parameter']!r}"
    return str(cond)


def _examples(result: Mapping[str, Any]) -> tuple[Any, ...]:
    values = result.get("partial_unexpected_list") or []
    return tuple(values[:5])


def failures(doc: Mapping[str, Any]) -> list[Failure]:
    dataset = doc.get("dataset") or doc.get("suite_name") or "?"
    out = []
    for item in doc.get("results", []):
        if item.get("success"):
            continue
        config = item.get("expectation_config") or {}
        kwargs = config.get("kwargs") or {}
        result = item.get("result") or {}
        info = item.get("exception_info") or {}
        error = info.get("exception_message") if info.get("raised_exception") else None
        out.append(
            Failure(
                dataset=dataset,
                expectation=config.get("type", "?"),
                where=_where(kwargs, kwargs.get("row_condition")),
                unexpected=result.get("unexpected_count"),
                total=result.get("element_count"),
                examples=_examples(result),
                error=error,
                observed=result.get("observed_value"),
            )
        )
    return out


def summarize(docs: Iterable[Mapping[str, Any]], docs_url: str) -> Summary:
    docs = list(docs)
    failed: list[Failure] = []
    per: dict[str, tuple[int, int]] = {}
    evaluated = 0
    for doc in docs:
        stats = doc.get("statistics") or {}
        n = int(stats.get("evaluated_expectations", len(doc.get("results", []))))
        ok = int(stats.get("successful_expectations", n - len(failures(doc))))
        name = doc.get("dataset") or doc.get("suite_name") or "?"
        per[name] = (ok, n)
        evaluated += n
        failed += failures(doc)
    success = bool(docs) and all(d.get("success") for d in docs) and not failed
    return Summary(success, evaluated, tuple(failed), per, docs_url)
