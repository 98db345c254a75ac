"""A small Prometheus text-format registry: counters and gauges with fixed label names."""

from __future__ import annotations

from collections import defaultdict


class Metric:
    def __init__(self, name: str, kind: str, help_text: str, labels: tuple[str, ...] = ()) -> None:
        self.name, self.kind, self.help, self.labels = name, kind, help_text, labels
        self.values: dict[tuple[str, ...], float] = defaultdict(float)
        if not labels:
            self.values[()] = 0.0

    def inc(self, amount: float = 1.0, *label_values: str) -> None:
        self.values[label_values] += amount

    def set(self, value: float, *label_values: str) -> None:
        self.values[label_values] = value

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]
        for label_values, value in sorted(self.values.items()):
            labels = ""
            if label_values:
                pairs = ",".join(f'{k}="{_escape(v)}"' for k, v in zip(self.labels, label_values))
                labels = "{" + pairs + "}"
            lines.append(f"{self.name}{labels} {value:g}")
        return lines


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class Metrics:
    def __init__(self) -> None:
        self.http_requests = Metric(
            "auditsync_http_requests_total",
            "counter",
            "HTTP requests by route and status",
            ("route", "status"),
        )
        self.appends = Metric("auditsync_appends_total", "counter", "append requests committed")
        self.records_appended = Metric(
            "auditsync_records_appended_total", "counter", "records appended"
        )
        self.trimmed = Metric(
            "auditsync_retention_gaps_total",
            "counter",
            "gaps rows written by retention",
            ("reason",),
        )
        self.open_streams = Metric("auditsync_open_streams", "gauge", "open SSE/watch streams")
        self.frames = Metric(
            "auditsync_frames_sent_total", "counter", "SSE frames sent", ("event",)
        )
        self.delivery_lag = Metric(
            "auditsync_delivery_lag_ms",
            "gauge",
            "append commit to first write of the newest delivered record",
        )
        self.tail_cache_limit_bytes = Metric(
            "auditsync_tail_cache_limit_bytes",
            "gauge",
            "bytes the tailers' record caches may hold together (AUDITSYNC_TAIL_CACHE_BYTES)",
        )
        self.tail_cache_bytes = Metric(
            "auditsync_tail_cache_bytes", "gauge", "bytes the shared tailers' record caches hold"
        )

    def render(self) -> str:
        out: list[str] = []
        for metric in vars(self).values():
            out.extend(metric.render())
        return "\n".join(out) + "\n"
