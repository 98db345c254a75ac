"""The plugin pages' one Jinja2 environment (autoescaped, strict), over ``ui/templates``."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

TEMPLATES = Path(__file__).resolve().parent / "templates"


@functools.cache
def template(name: str) -> Any:
    return _environment().get_template(name)


@functools.cache
def _environment() -> Any:
    import jinja2

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True, undefined=jinja2.StrictUndefined
    )
