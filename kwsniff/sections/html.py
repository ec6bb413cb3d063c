"""`kwsniff report --html FILE`: one self-contained page (plots inlined as PNG data URIs, style and
script inline, no network fetch) with every section and plot, read worst first: the findings at
the top, each table's rows in its section's worst-first order (catalog.Section.worst), every row
in the page, a click on a header sorting by that column and a box filtering the rows, numbers
with thousands separators and units while sorting uses the raw value (``data-v``), wide and long
tables scrolling inside their own box."""

from __future__ import annotations

import base64
import datetime as dt
import math
from collections.abc import Sequence
from html import escape
from typing import Any

from kwsniff.sections.catalog import Section
from kwsniff.sections.output import cell, sort_rows, worst_first

STYLE = """
body { font-family: sans-serif; margin: 1.5em; color: #212121; }
h1 { font-size: 1.4em; overflow-wrap: anywhere; }
h2 { font-size: 1.1em; margin-top: 1.8em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; font-size: 0.8em; }
td, th { padding: 2px 8px; text-align: left; white-space: nowrap; } td.sentence { white-space: normal; min-width: 36em; }
th { background: #eceff1; position: sticky; top: 0; cursor: pointer; white-space: nowrap; }
th[aria-sort=descending]::after { content: " \\25BC"; } th[aria-sort=ascending]::after { content: " \\25B2"; }
td.n { text-align: right; white-space: nowrap; } tr:nth-child(even) td { background: #fafafa; }
td.critical { color: #b71c1c; font-weight: bold; } td.warning { color: #e65100; }
img { max-width: 100%; display: block; margin: 0.8em 0; } .none, .count { color: #757575; }
nav { line-height: 1.6; } nav a { margin-right: 1em; white-space: nowrap; } nav a.empty { color: #9e9e9e; }
.wide { overflow: auto; max-width: 100%; max-height: 36em; } .tools { margin: 0.4em 0; font-size: 0.85em; }
"""

# Sort on a header's click (numbers by data-v, largest first on the first click; text A to Z; a
# second click turns it round; empty cells stay last) and filter on the box's input (rows whose
# text holds it, any case). Plain DOM calls, nothing fetched.
SCRIPT = """
(function () {
  function key(td, num) {
    if (td.classList.contains("null")) return null;
    if (!num) return td.textContent;
    var v = parseFloat(td.getAttribute("data-v"));
    return isNaN(v) ? null : v;
  }
  function sortBy(table, col, desc) {
    var body = table.tBodies[0], ths = table.tHead.rows[0].cells;
    var num = ths[col].hasAttribute("data-num");
    var keyed = Array.prototype.map.call(body.rows, function (r, i) {
      return [key(r.cells[col], num), i, r];
    });
    keyed.sort(function (a, b) {
      if (a[0] === null || b[0] === null) {
        return a[0] === b[0] ? a[1] - b[1] : (a[0] === null ? 1 : -1);
      }
      var c = num ? a[0] - b[0] : (a[0] < b[0] ? -1 : (a[0] > b[0] ? 1 : 0));
      return (desc ? -c : c) || a[1] - b[1];
    });
    // Rows move while their body is out of the page: moved in place, each move would restyle the
    // rows after it (nth-child stripes), a quadratic cost on long tables.
    var fresh = document.createElement("tbody");
    table.removeChild(body);
    keyed.forEach(function (k) { fresh.appendChild(k[2]); });
    table.appendChild(fresh);
    for (var i = 0; i < ths.length; i++) ths[i].removeAttribute("aria-sort");
    ths[col].setAttribute("aria-sort", desc ? "descending" : "ascending");
  }
  function filter(table, box, count) {
    var q = box.value.trim().toLowerCase(), shown = 0, rows = table.tBodies[0].rows;
    for (var i = 0; i < rows.length; i++) {
      var r = rows[i];
      if (r._text === undefined) r._text = r.textContent.toLowerCase();
      r.hidden = q !== "" && r._text.indexOf(q) < 0;
      if (!r.hidden) shown++;
    }
    count.textContent = (q === "" ? "" : shown.toLocaleString("en-US") + " of ")
      + rows.length.toLocaleString("en-US") + " rows";
  }
  document.querySelectorAll("table.rows").forEach(function (table) {
    var ths = table.tHead.rows[0].cells;
    Array.prototype.forEach.call(ths, function (th, col) {
      th.addEventListener("click", function () {
        var now = th.getAttribute("aria-sort");
        var desc = now ? now === "ascending" : th.hasAttribute("data-num");
        sortBy(table, col, desc);
      });
    });
    var tools = table.parentNode.previousElementSibling;
    var box = tools.querySelector("input"), count = tools.querySelector(".count");
    box.addEventListener("input", function () { filter(table, box, count); });
  });
})();
"""

# Columns of numbers that name a thing (a partition, a port, a version, an epoch): digits as they
# are, no thousands separator.
NAMES = {
    "partition",
    "api_key",
    "api_version",
    "broker_port",
    "client_port",
    "receiver_port",
    "broker_id",
    "node_id",
    "replica_id",
    "leader_id",
    "leader_epoch",
    "partition_epoch",
    "broker_epoch",
    "generation",
    "epoch",
    "max_epoch",
    "conn_id",
    "rank",
    "intended_node_id",
    "reported_node_id",
}
BYTE_UNITS = ("B", "KB", "MB", "GB", "TB", "PB")


def _places(value: float, places: int) -> str:
    """``value`` with thousands separators and at most ``places`` decimals, trailing zeros dropped."""
    text = f"{value:,.{places}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def duration(seconds: float) -> str:
    """A duration in ms under a second (``0.41 ms``, ``350 ms``), else in s (``1.25 s``, ``11,164 s``)."""
    if abs(seconds) < 1:
        ms = seconds * 1000
        return f"{_places(ms, 2 if abs(ms) < 10 else 1)} ms"
    return f"{_places(seconds, 2 if abs(seconds) < 100 else 0)} s"


def size(count: float) -> str:
    """Bytes in decimal units: ``999 B``, ``1.5 KB`` (1,000 bytes a KB), ``12.3 MB``."""
    unit = 0
    while abs(count) >= 1000 and unit < len(BYTE_UNITS) - 1:
        count /= 1000
        unit += 1
    return f"{_places(count, 1 if unit else 0)} {BYTE_UNITS[unit]}"


def shown(column: str, value: Any) -> tuple[str, str | None]:
    """(what a cell shows, the raw number it sorts by or None for text): units by the column's
    name (``*_ms`` and ``*_seconds`` durations, ``bytes*`` sizes), thousands separators."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-", None
    if isinstance(value, dt.datetime):
        return cell(value), str(int(value.timestamp() * 1_000_000))
    if isinstance(value, bool) or not isinstance(value, int | float):
        return cell(value), None
    raw = repr(value) if not math.isinf(value) else ("Infinity" if value > 0 else "-Infinity")
    if math.isinf(value):
        return str(value), raw
    if column in NAMES:
        return str(value), raw
    if column.endswith("_ms"):
        return duration(value / 1000), raw
    if column.endswith("_seconds"):
        return duration(value), raw
    if column == "bytes" or column.startswith("bytes_") or column.endswith("_bytes"):
        return size(value), raw
    if isinstance(value, float):
        return _places(value, 3), raw
    return f"{value:,}", raw


def _cell(column: str, value: Any) -> str:
    text, raw = shown(column, value)
    if raw is None and text == "-" and not isinstance(value, str):  # null, NaN
        return '<td class="null">-</td>'
    if raw is not None:
        return f'<td class="n" data-v="{raw}">{escape(text)}</td>'
    if column == "severity" and value in ("critical", "warning"):
        return f'<td class="{value}">{escape(text)}</td>'
    if column == "finding":  # a sentence: wraps, where every other cell keeps to one line
        return f'<td class="sentence">{escape(text)}</td>'
    return f"<td>{escape(text)}</td>"


def _numeric(rows: list[dict[str, Any]], column: str) -> bool:
    """Whether the column sorts as numbers: its values are numbers or times (bools are text)."""
    return any(
        isinstance(r[column], int | float | dt.datetime) and not isinstance(r[column], bool) for r in rows
    )


def _table(name: str, rows: list[dict[str, Any]], order: tuple[str, bool] | None) -> str:
    """A section's rows, every one, in the order given, with its filter box; ``order`` (column,
    largest first) marks the header the rows are sorted by."""
    if not rows:
        message = "no findings: none of the rules matched" if name == "findings" else "no rows"
        return f'<p class="none">{message}</p>'
    columns = list(rows[0])
    head = []
    for c in columns:
        attrs = " data-num" if _numeric(rows, c) else ""
        if order is not None and order[0] == c:
            attrs += f' aria-sort="{"descending" if order[1] else "ascending"}"'
        head.append(f'<th{attrs} title="sort by {escape(c)}">{escape(c)}</th>')
    body = "\n".join("<tr>" + "".join(_cell(c, r[c]) for c in columns) + "</tr>" for r in rows)
    tools = (
        f'<div class="tools"><input type="search" placeholder="filter rows" aria-label="filter {name} rows">'
        f' <span class="count">{len(rows):,} rows</span></div>'
    )
    table = (
        f'<div class="wide"><table class="rows" id="rows-{name}"><thead><tr>{"".join(head)}</tr></thead>'
        f"<tbody>\n{body}\n</tbody></table></div>"
    )
    return tools + table


def page_order(
    section: Section, rows: list[dict[str, Any]], sort_by: str | None = None
) -> tuple[list[dict[str, Any]], tuple[str, bool] | None]:
    """The rows as the page shows them first: worst first (``section.worst``), or by ``sort_by``
    (`--sort`, largest first) where the section has that column; and the header that order marks."""
    ordered = worst_first(rows, section.worst)
    if sort_by and rows and sort_by in rows[0]:
        return sort_rows(ordered, sort_by), (sort_by, True)
    if not section.worst:
        return ordered, None
    first = section.worst[0].split()
    return ordered, (first[0], first[-1].upper() == "DESC")


def page(
    title: str,
    sections: Sequence[Section],
    rows: dict[str, list[dict[str, Any]]],
    plots: dict[str, bytes],
    sort_by: str | None = None,
    top: int | None = None,
) -> str:
    """The page: a link per section with its row count, then each section (findings first, as the
    catalog orders them) with its plot, if any, and its rows (all of them, or the worst ``top``)."""
    present = [s for s in sections if s.name in rows]
    nav = " ".join(
        f'<a href="#{s.name}"{"" if rows[s.name] else " class=empty"}>{escape(s.name)}'
        f" ({len(rows[s.name]):,})</a>"
        for s in present
    )
    parts = [f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{escape(title)}</title>']
    parts.append(f"<style>{STYLE}</style></head><body><h1>{escape(title)}</h1><nav>{nav}</nav>")
    for s in present:
        every = rows[s.name]
        ordered, order = page_order(s, every, sort_by)
        kept = ordered[:top] if top else ordered
        count = f"{len(every):,} row{'' if len(every) == 1 else 's'}" + (
            f", the worst {len(kept):,} here" if len(kept) < len(every) else ""
        )
        parts.append(f'<h2 id="{s.name}">{escape(s.title)} ({count})</h2>')
        if s.name in plots:
            data = base64.b64encode(plots[s.name]).decode()
            parts.append(f'<img alt="{escape(s.name)} plot" src="data:image/png;base64,{data}">')
        parts.append(_table(s.name, kept, order))
    parts.append(f"<script>{SCRIPT}</script></body></html>")
    return "\n".join(parts)
