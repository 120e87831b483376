"""LIKE patterns: the one escaping rule, so a `%`, `_` or `\\` in a value matches only itself."""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement

ESCAPE = "\\"


def prefix_pattern(text: str) -> str:
    """A LIKE pattern (escape character `\\`) for what starts with `text`, wildcards and all."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def starts_with(column: ColumnElement[Any], text: str) -> ColumnElement[bool]:
    """`column` starts with `text` (the LIKE that an index on `column` can serve)."""
    return column.like(prefix_pattern(text), escape=ESCAPE)
