"""The payload hash and the range digest, once, in each language they are computed in.

The payload hash is the SHA-256 (lowercase hex) of a payload's text as UTF-8: the sink's
``data_sha256`` (Python), a source record's hash in reconcile and backfill (Spark SQL over
``data::text`` read by JDBC) and PostgreSQL's. The range digest is the SHA-256 of the lines
``"<seq>:<payload hash>\\n"`` of a range's records in seq order: reconcile stores it per block of
judged seqs (Spark) and a later run recomputes it in PostgreSQL to see whether the source
rewrote the range. If two forms drifted, every stored range would look rewritten and be
re-checked seq by seq; ``tests/spark/test_hash_parity.py`` runs the three forms on the same
inputs.

The Spark and PostgreSQL forms are SQL expression texts over the expressions given (column
names, or any expression of the right type), so this module stays pure: Spark call sites wrap
them in ``F.expr``, PostgreSQL statements embed them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable


def payload_hash(text: str) -> str:
    """SHA-256 hex of a payload's text (UTF-8)."""
    return hashlib.sha256(text.encode()).hexdigest()


def spark_payload_hash(text: str) -> str:
    """Spark SQL: the payload hash of the string expression ``text``."""
    return f"sha2({text}, 256)"


def sql_payload_hash(text: str) -> str:
    """PostgreSQL: the payload hash of the text expression ``text``."""
    return f"encode(sha256(convert_to({text}, 'UTF8')), 'hex')"


def digest_line(seq: int, text: str) -> str:
    """One record's line of a range digest."""
    return f"{seq}:{payload_hash(text)}\n"


def range_digest(records: Iterable[tuple[int, str]]) -> str:
    """The digest of (seq, text) records, whatever their order."""
    lines = "".join(digest_line(seq, text) for seq, text in sorted(records))
    return hashlib.sha256(lines.encode()).hexdigest()


def spark_digest_line(seq: str, text: str) -> str:
    """Spark SQL: one record's line of a range digest."""
    return f"concat(cast({seq} AS STRING), ':', {spark_payload_hash(text)}, char(10))"


def spark_range_digest(lines: str) -> str:
    """Spark SQL: the digest of ``lines``, an array of ``spark_digest_line`` values in seq
    order."""
    return f"sha2(array_join({lines}, ''), 256)"


def sql_range_digest(seq: str, text: str) -> str:
    """PostgreSQL: the digest of the records aggregated over (an aggregate expression)."""
    line = f"{seq}::text || ':' || {sql_payload_hash(text)} || chr(10)"
    return f"encode(sha256(convert_to(string_agg({line}, '' ORDER BY {seq}), 'UTF8')), 'hex')"
