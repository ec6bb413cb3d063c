"""The HTML report reads worst first (issue 49, goal 2), checked in headless Chromium at a window
1,400 px wide: the page has no horizontal overflow (wide tables scroll inside their own box), the
findings come first, every table holds all its rows with its worst row first, a click on a header
sorts by that column and the filter box hides the rows not holding its text. Over every capture of
the repository decoded into one dataset (the quick start's and tests/data/captures'), so sections
have tens of rows. The worst rows expected are computed from the tables themselves (pandas over
`requests`, `errors` and `partitions`) or, for every section, by DuckDB over the section's answer
(kwsniff.report) ordered by the section's declared worst-first keys; the page's cells are read in
Chromium by a probe script injected before `</body>`, which writes what it saw into the DOM that
`--dump-dom` prints."""

from __future__ import annotations

import datetime as dt
import html
import json
import math
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import kwsniff
from kwsniff.cli import main
from kwsniff.sections.catalog import BY_NAME, SECTIONS
from kwsniff.sections.html import duration, shown, size

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = [ROOT / "sample_pcaps/quickstart.pcap", *sorted((ROOT / "tests/data/captures").glob("*.pcap"))]
WIDTH = 1400

# Injected into the page: reads every table (each cell: its data-v, or its text, or null for an
# empty cell), then clicks the latency table's `requests` header twice and its `client_id` header
# once, reading the column after each, then types into the latency table's filter box.
PROBE = """
(function () {
  function value(td) {
    if (td.classList.contains("null")) return null;
    return td.hasAttribute("data-v") ? td.getAttribute("data-v") : td.textContent;
  }
  function rows(t, all) {
    return Array.prototype.filter.call(t.tBodies[0].rows, function (r) {
      return all || (!r.hidden && r.getClientRects().length > 0);
    }).map(function (r) { return Array.prototype.map.call(r.cells, value); });
  }
  var out = {width: window.innerWidth, scrollWidth: document.documentElement.scrollWidth,
             order: [], tables: {}};
  document.querySelectorAll("h2").forEach(function (h) { out.order.push(h.id); });
  document.querySelectorAll("table.rows").forEach(function (t) {
    out.tables[t.id.slice(5)] = {
      columns: Array.prototype.map.call(t.tHead.rows[0].cells, function (th) { return th.textContent; }),
      rows: rows(t, true), box: t.parentNode.clientWidth, width: t.scrollWidth,
      boxRight: t.parentNode.getBoundingClientRect().right};
  });
  var t = document.getElementById("rows-latency"), ths = t.tHead.rows[0].cells;
  var cols = out.tables.latency.columns;
  ths[cols.indexOf("requests")].click();
  out.requestsOnce = rows(t, true);
  ths[cols.indexOf("requests")].click();
  out.requestsTwice = rows(t, true);
  ths[cols.indexOf("client_id")].click();
  out.clientOnce = rows(t, true);
  var tools = t.parentNode.previousElementSibling, box = tools.querySelector("input");
  box.value = "RIG-KP";
  box.dispatchEvent(new Event("input"));
  out.filtered = rows(t, false);
  out.count = tools.querySelector(".count").textContent;
  var pre = document.createElement("pre");
  pre.id = "probe";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
"""


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("captures") / "tables"
    done = CliRunner().invoke(main, ["read", "-q", *map(str, CAPTURES), "--out", str(out)])
    assert done.exit_code == 0, done.output
    return out


@pytest.fixture(scope="module")
def page(dataset: Path) -> str:
    out = dataset.parent / "report.html"
    done = CliRunner().invoke(main, ["report", str(dataset), "--html", str(out)])
    assert done.exit_code == 0, done.output
    return out.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def seen(page: str, dataset: Path) -> dict[str, Any]:
    """What the probe saw in Chromium, the window WIDTH px wide."""
    probed = dataset.parent / "probed.html"
    assert page.count("</body>") == 1
    probed.write_text(page.replace("</body>", f"<script>{PROBE}</script></body>"), encoding="utf-8")
    chromium = shutil.which("chromium")
    assert chromium, "chromium missing: tools/install-test-deps.sh installs it"
    done = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
        + [f"--window-size={WIDTH},900", "--virtual-time-budget=10000", "--dump-dom", probed.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    found = re.search(r'<pre id="probe">(.*?)</pre>', done.stdout, re.S)
    assert found, done.stdout[-2000:]
    probe: dict[str, Any] = json.loads(html.unescape(found.group(1)))
    return probe


@pytest.fixture(scope="module")
def answers(dataset: Path) -> dict[str, pa.Table]:
    return kwsniff.report(dataset)


def same(cell: str | None, value: Any) -> bool:
    """Whether a cell as the probe read it is ``value`` of the section's answer: a number by its raw
    value (data-v), a time by its microseconds since the epoch, text as it is."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return cell is None
    if isinstance(value, dt.datetime):
        return cell is not None and int(cell) == round(value.timestamp() * 1_000_000)
    if isinstance(value, bool):
        return cell == str(value)
    if isinstance(value, int | float):
        return cell is not None and float(cell) == float(value)
    return cell == value


def same_row(cells: list[str | None], row: dict[str, Any]) -> bool:
    return len(cells) == len(row) and all(same(c, v) for c, v in zip(cells, row.values(), strict=True))


def worst_rows(table: pa.Table, keys: tuple[str, ...]) -> list[dict[str, Any]]:
    """The rows of ``table`` that are first by ``keys`` ("column [DESC]", nulls last) and tie on
    them: DuckDB's ORDER BY, then every row equal to the first on the keys."""
    import duckdb

    order = ", ".join(f"{k} NULLS LAST" for k in keys)
    ranked = duckdb.sql(f"SELECT * FROM answer ORDER BY {order}", connection=_with(table)).to_arrow_table()
    rows = ranked.to_pylist()
    columns = [k.split()[0] for k in keys]
    return [r for r in rows if all(r[c] == rows[0][c] for c in columns)]


def _with(table: pa.Table) -> Any:
    import duckdb

    con = duckdb.connect()
    con.register("answer", table)
    return con


def test_the_page_has_no_horizontal_overflow_at_1400_px(seen: dict) -> None:
    assert seen["width"] == WIDTH
    assert seen["scrollWidth"] <= WIDTH
    # The stopped table is wider than the window: it scrolls inside its own box, which ends inside it.
    stopped = seen["tables"]["stopped"]
    assert stopped["width"] > WIDTH > stopped["box"]
    assert all(t["boxRight"] <= WIDTH for t in seen["tables"].values())


def test_findings_come_first_then_the_sections_in_the_catalogs_order(seen: dict, answers: dict) -> None:
    assert seen["order"] == [s.name for s in SECTIONS]
    assert list(seen["tables"])[0] == "findings"
    findings = answers["findings"].to_pylist()
    # The legacy producers' failed responses and old versions (tests/data/captures/legacy_msgset).
    assert len(findings) == 5 and findings[0]["rule"] == "client_errors"
    assert [r[0] for r in seen["tables"]["findings"]["rows"]] == ["1", "2", "3", "4", "5"]


def test_every_table_holds_every_row_with_its_worst_first(seen: dict, answers: dict) -> None:
    with_rows = {n for n, t in answers.items() if t.num_rows}
    assert set(seen["tables"]) == with_rows and len(with_rows) >= 15
    for name in with_rows:
        table, keys = answers[name], BY_NAME[name].worst
        shown_rows = seen["tables"][name]["rows"]
        assert seen["tables"][name]["columns"] == table.column_names, name
        assert len(shown_rows) == table.num_rows, name
        assert keys, f"{name} declares no worst-first order"
        assert any(same_row(shown_rows[0], r) for r in worst_rows(table, keys)), (name, shown_rows[0])


def test_the_first_latency_row_has_the_highest_p99_of_the_requests_table(seen: dict, dataset: Path) -> None:
    requests = pq.read_table(dataset / "requests").to_pandas()
    # Long polls (Fetch, ShareFetch, JoinGroup) apart, answered requests; nearest-rank p99.
    timed = requests[~requests.api_key.isin([1, 78, 11]) & requests.latency_ms.notna()]
    per = timed.groupby(["api_name", "api_version", "client_id"]).latency_ms.agg(
        p99=lambda v: sorted(v)[math.ceil(0.99 * len(v)) - 1], top="max", n="size"
    )
    per = per.reset_index().sort_values(["p99", "top"], ascending=False)
    best = per.iloc[0]
    tied = per[(per.p99 == best.p99) & (per.top == best.top)]
    assert len(tied) == 1  # the capture's one slowest: no tie to break
    first = dict(zip(seen["tables"]["latency"]["columns"], seen["tables"]["latency"]["rows"][0], strict=True))
    assert (first["api_name"], int(first["api_version"]), first["client_id"]) == (
        best.api_name,
        best.api_version,
        best.client_id,
    )
    assert (int(first["requests"]), float(first["p99_ms"]), float(first["max_ms"])) == (
        best.n,
        best.p99,
        best.top,
    )


def test_the_first_errors_row_is_the_most_frequent_failure_in_the_errors_table(
    seen: dict, dataset: Path
) -> None:
    from kwsniff.protocol.error_codes import error_expected

    errors = pq.read_table(dataset / "errors").to_pylist()
    failures: dict[tuple, int] = {}
    for e in errors:
        if not error_expected(e["error_code"], e["api_key"]):
            key = (e["error_name"], e["api_name"], e["topic"], e["client_id"])
            failures[key] = failures.get(key, 0) + 1
    most = max(failures.values())
    columns = seen["tables"]["errors"]["columns"]
    first = dict(zip(columns, seen["tables"]["errors"]["rows"][0], strict=True))
    assert first["kind"] == "failure" and int(first["errors"]) == most
    assert failures[(first["error_name"], first["api_name"], first["topic"], first["client_id"])] == most


def test_the_first_throughput_row_is_the_busiest_minute_of_the_partitions_table(
    seen: dict, dataset: Path
) -> None:
    parts = pq.read_table(dataset / "partitions").to_pandas()
    produced = parts[parts.api_key == 0].assign(minute=lambda f: f.ts_request.dt.floor("min"))
    per = produced.groupby(["topic", "minute"]).agg(
        records=("record_count", "sum"), bytes=("record_bytes", "sum")
    )
    per = per.reset_index().sort_values(["records", "bytes"], ascending=False)
    best = per.iloc[0]
    assert (per.records == best.records).sum() >= 1
    columns = seen["tables"]["throughput"]["columns"]
    first = dict(zip(columns, seen["tables"]["throughput"]["rows"][0], strict=True))
    busiest = per[(per.records == best.records) & (per.bytes == best.bytes)]
    assert (int(first["records"]), int(first["bytes"])) == (best.records, best.bytes)
    assert first["topic"] in set(busiest.topic)


def test_a_click_on_a_header_sorts_by_it_and_a_second_turns_it_round(seen: dict, answers: dict) -> None:
    columns = seen["tables"]["latency"]["columns"]
    requests, client = columns.index("requests"), columns.index("client_id")
    counts = answers["latency"].column("requests").to_pylist()
    assert [int(r[requests]) for r in seen["requestsOnce"]] == sorted(counts, reverse=True)
    assert [int(r[requests]) for r in seen["requestsTwice"]] == sorted(counts)
    clients = answers["latency"].column("client_id").to_pylist()
    assert [r[client] for r in seen["clientOnce"]] == sorted(clients)
    # The rows moved whole: each is still a row of the answer.
    answer = answers["latency"].to_pylist()
    assert all(any(same_row(cells, r) for r in answer) for cells in seen["clientOnce"])


def test_the_filter_hides_the_rows_not_holding_its_text(seen: dict, answers: dict) -> None:
    holding = [
        r for r in answers["latency"].to_pylist() if any("rig-kp" in str(v).lower() for v in r.values())
    ]
    assert 0 < len(holding) < answers["latency"].num_rows
    assert len(seen["filtered"]) == len(holding)
    assert all("rig-kp" in " ".join(c or "" for c in cells).lower() for cells in seen["filtered"])
    assert seen["count"] == f"{len(holding)} of {answers['latency'].num_rows} rows"


def test_numbers_show_separators_and_units_and_sort_by_their_raw_value(page: str, answers: dict) -> None:
    assert (duration(0.000412), duration(0.35), duration(1.2345), duration(245.4)) == (
        "0.41 ms",
        "350 ms",
        "1.23 s",
        "245 s",
    )
    assert (size(999), size(1500), size(300_140), size(12_345_678)) == (
        "999 B",
        "1.5 KB",
        "300.1 KB",
        "12.3 MB",
    )
    assert shown("records", 11164) == ("11,164", "11164")
    assert shown("p99_ms", 23216.447) == ("23.22 s", "23216.447")
    assert shown("partition", 10000) == ("10000", "10000")
    # On the page: the busiest client's bytes, raw in data-v.
    top = max(answers["inventory"].column("bytes").to_pylist(), key=lambda v: v or 0)
    assert f'<td class="n" data-v="{top}">{size(top)}</td>' in page


def test_the_page_fetches_nothing(page: str) -> None:
    assert "http://" not in page and "https://" not in page
    assert re.findall(r'\bsrc="([^"]{0,22})', page) == ["data:image/png;base64,"] * page.count(" src=")
    assert page.count("<script>") == 1 and "<script src" not in page and "<link" not in page


def test_every_sections_worst_order_names_its_columns(answers: dict) -> None:
    for s in SECTIONS:
        columns = [k.split()[0] for k in s.worst]
        assert columns and set(columns) <= set(answers[s.name].column_names), s.name
        assert all(k.split()[1:] in ([], ["DESC"]) for k in s.worst), s.name


def test_top_keeps_the_worst_rows_on_the_page(dataset: Path, answers: dict) -> None:
    out = dataset.parent / "top.html"
    args = ["report", str(dataset), "--section", "latency", "--top", "3", "--html", str(out)]
    done = CliRunner().invoke(main, args)
    assert done.exit_code == 0, done.output
    text = out.read_text(encoding="utf-8")
    assert f"({answers['latency'].num_rows} rows, the worst 3 here)" in text
    body = text[text.index("<tbody>") : text.index("</tbody>")]
    highest = sorted(answers["latency"].column("p99_ms").to_pylist(), reverse=True)
    column = answers["latency"].column_names.index("p99_ms")
    rows = [re.findall(r"<td([^>]*)>", row) for row in re.findall(r"<tr>(.*?)</tr>", body)]
    assert [float(re.search(r'data-v="([^"]+)"', r[column]).group(1)) for r in rows] == highest[:3]


def test_names_from_the_wire_are_text_on_the_page_never_markup() -> None:
    from kwsniff.sections.html import page

    hostile = "</td><script>alert(1)</script>\x1b]0;t\x07"
    columns = ["client_id", "topic", "records", "bytes", "requests"]
    row = {**dict.fromkeys(columns), "client_id": hostile, "records": 3}
    text = page("<b>t</b>", [BY_NAME["inventory"]], {"inventory": [row]}, {})
    assert "<script>alert" not in text and "<b>t</b>" not in text
    assert "&lt;/td&gt;&lt;script&gt;alert(1)&lt;/script&gt;\\x1b]0;t\\x07" in text
    assert '<td class="null">-</td>' in text and '<td class="n" data-v="3">3</td>' in text


def test_docs_say_each_sections_worst_first_order() -> None:
    doc = (ROOT / "docs/report.md").read_text(encoding="utf-8")
    table = doc[doc.index("| section | worst first by |") :].split("\n\n")[0].splitlines()[2:]
    said = {}
    for line in table:
        names, keys = line.strip("|").split("|")
        for name in re.findall(r"`(\w+)`", names):
            said[name] = re.findall(r"`(\w+)`", keys)
    assert set(said) == {s.name for s in SECTIONS}
    for s in SECTIONS:
        columns = [k.split()[0] for k in s.worst]
        # Every key in order (values in parentheses, e.g. stopped's states, apart).
        assert [c for c in said[s.name] if c in columns] == columns, s.name


def test_sort_orders_the_page_by_its_column_where_a_section_has_it() -> None:
    from kwsniff.sections.html import page_order

    rows = [
        {"topic": "a", "requests": 5, "records": 9, "p50_ms": 1.0, "p99_ms": 2.0, "max_ms": 3.0},
        {"topic": "b", "requests": 7, "records": 1, "p50_ms": 1.0, "p99_ms": 9.0, "max_ms": 9.0},
        {"topic": "c", "requests": 6, "records": None, "p50_ms": 1.0, "p99_ms": None, "max_ms": None},
    ]
    section = BY_NAME["produce_latency"]
    worst, mark = page_order(section, rows)
    assert ([r["topic"] for r in worst], mark) == (["b", "a", "c"], ("p99_ms", True))
    by_records, mark = page_order(section, rows, "records")
    assert ([r["topic"] for r in by_records], mark) == (["a", "b", "c"], ("records", True))
    # A column the section lacks leaves the worst-first order.
    assert page_order(section, rows, "lag_seconds") == (worst, ("p99_ms", True))
