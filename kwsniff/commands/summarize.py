"""The report's per-capture summaries, written by `read` and `spark` beside the tables they stage."""

from __future__ import annotations

import shutil
from pathlib import Path

from kwsniff.commands import messages
from kwsniff.memory import DEFAULT_MEMORY_LIMIT
from kwsniff.tables.names import SUMMARIES

# Disk DuckDB may spill into while it summarizes, as `report --spill-limit` by default.
SPILL_LIMIT = 16 * DEFAULT_MEMORY_LIMIT


def summarize(stage: Path, memory_limit: int) -> None:
    """Write the summaries of the captures in ``stage`` (kwsniff.report.summaries), DuckDB holding at
    most ``memory_limit`` bytes (the run's --memory-limit, its decoding done). When they cannot be
    written: one warning, and the tables are committed without them (`report` then computes those
    sections from the rows, as it does for tables written before summaries existed)."""
    from kwsniff.report import summaries

    try:
        summaries.write(stage, memory_limit, SPILL_LIMIT)
    except Exception as exc:  # DuckDB's errors, a full disk, or a fault of ours: the tables are kept
        for name in SUMMARIES:
            shutil.rmtree(stage / name, ignore_errors=True)
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        messages.warnings(
            "summaries", [f"not written ({reason}); `kwsniff report` computes those sections from the rows"]
        )
