"""Run report sections on an engine and keep the rows a user asked for."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kwsniff.report.engines import DuckEngine, Filters, Row, SparkEngine
from kwsniff.report.sections import SECTIONS, Section

# --topic/--client/--group match these columns of a section's rows, where it has them.
NAME_FILTERS = {"topic": ("topic",), "client": ("client_id",), "group": ("group_id",)}


def open_engine(tables: Path, filters: Filters, spark: Any = None) -> DuckEngine | SparkEngine:
    return DuckEngine(tables, filters) if spark is None else SparkEngine(tables, filters, spark)


def keep(rows: list[Row], filters: Filters) -> list[Row]:
    for option, columns in NAME_FILTERS.items():
        wanted = getattr(filters, option)
        if wanted is None:
            continue
        for column in columns:
            if rows and column in rows[0]:
                rows = [r for r in rows if r[column] == wanted]
    return rows


def answer(
    engine: DuckEngine | SparkEngine, filters: Filters, sections: Sequence[Section] = SECTIONS
) -> dict[str, list[Row]]:
    """{section name: its rows}, in the sections' order."""
    return {s.name: keep(engine.run(_bind(s.sql, filters)), filters) for s in sections}


def _bind(sql: str, filters: Filters) -> str:
    from kwsniff.report.sections_lag import SESSION_TIMEOUT

    return sql.replace(SESSION_TIMEOUT, str(int(filters.session_timeout_ms)))
