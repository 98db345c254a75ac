"""The NUL rule, kept once: PostgreSQL ``text`` (and ``jsonb``) cannot hold U+0000, so request
text that may reach SQL is refused with a 4xx when it holds one, at the one place each input
family enters (``web.nul_gate`` for request lines and headers, ``compat.permify_json`` for
Permify bodies and page tokens, ``compat.grpc_nul`` for every gRPC message), never left to
PostgreSQL to refuse with a 500.

Record ``data`` and ``meta`` are the exception: they are stored as ``json``, whose text keeps
a ``\\u0000`` escape as written.
"""

from __future__ import annotations

from typing import Any

NUL = "\x00"


def message(path: str) -> str:
    """The refusal's message, the same on every surface."""
    return f"{path}: NUL characters are not allowed in strings"


def find_nul(doc: Any, path: str) -> str | None:
    """The path of the first string in ``doc`` (strings, dict keys and values, lists and
    tuples, nested) that holds a NUL; None when none does."""
    if isinstance(doc, str):
        return path if NUL in doc else None
    if isinstance(doc, dict):
        for k, v in doc.items():
            found = find_nul(k, path) or find_nul(v, f"{path}.{k}")
            if found:
                return found
    elif isinstance(doc, (list, tuple)):
        for i, v in enumerate(doc):
            found = find_nul(v, f"{path}[{i}]")
            if found:
                return found
    return None
