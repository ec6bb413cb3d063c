"""Report sections answered in the test's own process on either engine: DuckDB, or Spark through the
session-wide `spark` fixture (the tests that hold a section's answer against its oracle on both)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kwsniff.sections.catalog import BY_NAME
from kwsniff.sections.engines import DuckEngine, Filters, SparkEngine
from kwsniff.sections.run import answer


def answer_sections(
    tables: Path, names: list[str], engine_name: str, request: pytest.FixtureRequest
) -> dict[str, list[dict[str, Any]]]:
    """{section: its rows} of the sections ``names`` over ``tables`` on ``engine_name``."""
    sections = [BY_NAME[name] for name in names]
    if engine_name == "spark":
        engine = SparkEngine(tables, Filters(), request.getfixturevalue("spark"))
        try:
            return answer(engine, Filters(), sections)
        finally:
            engine.close()
    with DuckEngine(tables, Filters()) as duck:
        return answer(duck, Filters(), sections)
