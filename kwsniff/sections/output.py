"""A report's answers as text (aligned tables), JSON (one object keyed by section) or CSV."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from typing import Any

from kwsniff.view.escape import csv_safe, visible

Answers = dict[str, list[dict[str, Any]]]


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, dt.datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"
    # Strings from the wire reach a terminal: control characters as visible escapes.
    return visible(str(value))


def sort_rows(rows: list[dict[str, Any]], column: str | None) -> list[dict[str, Any]]:
    """Rows by ``column`` descending (biggest first; nulls last); unchanged when the section lacks it."""
    if not column or not rows or column not in rows[0]:
        return rows
    present = [r for r in rows if r[column] is not None]
    return sorted(present, key=lambda r: r[column], reverse=True) + [r for r in rows if r[column] is None]


def worst_first(rows: list[dict[str, Any]], keys: tuple[str, ...]) -> list[dict[str, Any]]:
    """Rows in a section's worst-first order (catalog.Section.worst): each key "column" (smallest
    first) or "column DESC" (largest first), nulls last either way, ties in the rows' own order."""
    out = list(rows)
    if not out:
        return out
    for key in reversed(keys):  # a stable sort per key, the last key first
        column, _, direction = key.partition(" ")
        present = [r for r in out if r[column] is not None]
        present.sort(key=lambda r: r[column], reverse=direction.strip().upper() == "DESC")
        out = present + [r for r in out if r[column] is None]
    return out


def text_table(title: str, rows: list[dict[str, Any]], total: int) -> str:
    """A plain aligned table (pipes and grep stay easy), with the count of rows not shown."""
    lines = [f"\n{title} ({total:,} rows)"]
    if rows:
        columns = list(rows[0])
        cells = [[cell(r[c]) for c in columns] for r in rows]
        widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
        lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
        lines += ["  " + "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    if total > len(rows):
        lines.append(f"  ... {total - len(rows):,} more")
    return "\n".join(lines)


def _jsonable(v: Any) -> Any:
    if isinstance(v, dt.datetime):
        return v.isoformat().replace("+00:00", "Z")
    return v


def as_json(answers: Answers) -> str:
    return json.dumps(
        {name: [{k: _jsonable(v) for k, v in r.items()} for r in rows] for name, rows in answers.items()},
        indent=1,
    )


def as_csv(answers: Answers, terminal: bool = False) -> str:
    """Every section in one CSV stream: a `section` column first, then that section's columns (a
    header line each time the section changes). A string that would start a formula in a
    spreadsheet gets a leading `'` (kwsniff.view.escape.csv_safe); for a ``terminal``, control
    characters are written as visible escapes, elsewhere cells keep what was sent."""
    out = io.StringIO()
    header = csv.writer(out, lineterminator="\n")
    # Every string cell quoted (OWASP's advice, and a CR from the wire stays inside its cell); numbers
    # bare, so a spreadsheet reads them, negative ones too, as numbers.
    writer = csv.writer(out, lineterminator="\n", quoting=csv.QUOTE_NONNUMERIC)
    for name, rows in answers.items():
        if not rows:
            continue
        columns = list(rows[0])
        header.writerow(["section", *columns])
        for r in rows:
            cells = ("" if r[c] is None else csv_safe(_jsonable(r[c])) for c in columns)
            writer.writerow([name, *(visible(v) if terminal and isinstance(v, str) else v for v in cells)])
    return out.getvalue()
