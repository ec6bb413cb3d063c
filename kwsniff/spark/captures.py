"""The `captures` table of a Spark run: one row per input, made on the driver from the status chunk
every task of the input yields (a capture split by flow bucket has one per bucket task).

The row is the one `kwsniff read` writes for the same file (kwsniff.pipeline.run.capture_row): the
packets of its tasks add up to the file's, since each packet is fed to exactly one bucket; a
warning every bucket task read is given once; the capture failed if any of its tasks did, and then
none of its rows are kept. ``duration_ms`` sums its tasks' decoding time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kwsniff.pipeline.run import capture_row


def capture_rows(
    inputs: Sequence[tuple[str, str]],
    statuses: Sequence[tuple[str, str, dict[str, Any]]],
    damage: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The `captures` rows (with their `date`, None when no packet was read) in input order.

    ``inputs``: (path as shown, capture name) of every input; ``statuses``: (capture name, date,
    status) of every task; ``damage``: by capture name, where the byte-range index of a split
    capture found it cut or broken (its bucket tasks read only whole records, so never meet it)."""
    by_name: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for name, date, status in statuses:
        by_name.setdefault(name, []).append((date, status))
    rows = []
    for path, name in inputs:
        mine = by_name.get(name, [])
        found = [s for _, s in mine]
        warnings = list(dict.fromkeys(w for s in found for w in s["warnings"]))
        if damage and name in damage and damage[name] not in warnings:
            warnings.append(damage[name])
        row = capture_row(
            name,
            path,
            file_bytes=next((s["bytes"] for s in found if s["bytes"] is not None), None),
            packets=sum(s["packets"] for s in found),
            warnings=warnings,
            error=min(
                (s["error"] for s in found if s["error"]), default=None if found else "no task reported"
            ),
            started_us=min((s["started"] for s in found), default=0),
            seconds=sum(s["seconds"] for s in found),
            # The file's last packet is the latest of its tasks' (each reads its flow bucket).
            ended_us=max((s["last_ts"] for s in found if s.get("last_ts") is not None), default=None),
            broker_conflicts=sum(s.get("broker_conflicts", 0) for s in found),
        )
        row["date"] = next((d for d, _ in mine if d), None)
        rows.append(row)
    return rows
