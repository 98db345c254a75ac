"""Hive partition folder names as Spark writes them (``topic=a%2Fb``), so a job can name the
folders of the partitions it touches without listing a table. The escaping is Spark's
``ExternalCatalogUtils.escapePathName``; callers compare with what Spark wrote and refuse to
go on if the two ever disagree."""

from __future__ import annotations

import datetime as dt

_SPECIAL = set("\"#%'*/:=?\\\x7f{[]^")


def escape(value: str) -> str:
    return "".join(f"%{ord(c):02X}" if c in _SPECIAL or ord(c) < 0x20 else c for c in value)


def folder(**values: object) -> str:
    """``folder(topic="t", date=date(2024, 1, 2))`` -> ``topic=t/date=2024-01-02``."""
    parts = []
    for name, value in values.items():
        text = value.isoformat() if isinstance(value, dt.date) else str(value)
        parts.append(f"{name}={escape(text)}")
    return "/".join(parts)
