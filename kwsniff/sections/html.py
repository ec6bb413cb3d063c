"""`kwsniff report --html FILE`: one self-contained page (plots inlined as PNG data URIs, styles
inline, no script and no network fetch) with every section and plot."""

from __future__ import annotations

import base64
from html import escape
from typing import Any

from kwsniff.sections.output import cell

STYLE = """
body { font-family: sans-serif; margin: 1.5em; color: #212121; }
h1 { font-size: 1.4em; } h2 { font-size: 1.1em; margin-top: 1.8em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; font-size: 0.8em; } td, th { padding: 2px 8px; text-align: left; }
th { background: #eceff1; } tr:nth-child(even) td { background: #fafafa; }
img { max-width: 100%; display: block; margin: 0.8em 0; } .more, .none { color: #757575; }
nav a { margin-right: 1em; } .wide { overflow-x: auto; }
"""


def _table(rows: list[dict[str, Any]], total: int) -> str:
    if not rows:
        return '<p class="none">no rows</p>'
    columns = list(rows[0])
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{escape(cell(r[c]))}</td>" for c in columns) + "</tr>" for r in rows
    )
    more = f'<p class="more">... {total - len(rows):,} more rows</p>' if total > len(rows) else ""
    return f'<div class="wide"><table><tr>{head}</tr>{body}</table></div>{more}'


def page(
    title: str,
    titles: dict[str, str],
    rows: dict[str, list[dict[str, Any]]],
    totals: dict[str, int],
    plots: dict[str, bytes],
) -> str:
    """The page: a link per section, then each section's plot (if any), its first ``rows`` and how
    many it has in all (``totals``)."""
    nav = " ".join(f'<a href="#{n}">{escape(n)}</a>' for n in rows)
    parts = [f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{escape(title)}</title>']
    parts.append(f"<style>{STYLE}</style></head><body><h1>{escape(title)}</h1><nav>{nav}</nav>")
    for name, first in rows.items():
        parts.append(f'<h2 id="{name}">{escape(titles.get(name, name))} ({totals[name]:,} rows)</h2>')
        if name in plots:
            data = base64.b64encode(plots[name]).decode()
            parts.append(f'<img alt="{escape(name)} plot" src="data:image/png;base64,{data}">')
        parts.append(_table(first, totals[name]))
    parts.append("</body></html>")
    return "\n".join(parts)
