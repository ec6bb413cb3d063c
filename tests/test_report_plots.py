"""The report's plots stay readable for one minute and for one week of data: the quick start's
tables stretched to a minute, or copied once a day for a week, through `report --html` (rendered in headless
Chromium). Each figure's axes are read from the figure the report draws and held against the
tables' own times (pandas): the time axis spans the data and no more, counts start at 0, every
time tick is labelled alike for the span, and logarithmic axes read as plain numbers."""

from __future__ import annotations

import datetime as dt
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from kwsniff.cli import main
from kwsniff.sections import figures

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "sample_pcaps/quickstart.pcap"
START = dt.datetime(2026, 3, 2, 8, 0, 0, tzinfo=dt.UTC)
SPANS = {"minute": dt.timedelta(minutes=1), "week": dt.timedelta(days=7)}
# The tables of `read`, not the report's summaries (those would be of the times before stretching).
TABLES = ("requests", "partitions", "groups", "connections", "errors", "records", "captures")
# The one tick format of a time axis by the span it shows (figures' docstring): up to 10 minutes,
# a day, three days, and more.
TICKS = (
    (dt.timedelta(minutes=10), r"\d\d:\d\d:\d\d"),
    (dt.timedelta(days=1), r"\d\d:\d\d"),
    (dt.timedelta(days=3), r"\d\d-\d\d \d\d:\d\d"),
    (dt.timedelta.max, r"\d{4}-\d\d-\d\d"),
)
PLAIN = re.compile(r"[0-9][0-9,]*(\.[0-9]+)?")


def packet_times(table: pa.Table) -> list[str]:
    """Its columns of capture time (every timestamp but `captures.started`, a wall clock)."""
    return [f.name for f in table.schema if pa.types.is_timestamp(f.type) and f.name != "started"]


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("qs") / "tables"
    done = CliRunner().invoke(main, ["read", "-q", str(QUICKSTART), "--out", str(out)])
    assert done.exit_code == 0, done.output
    return out


def stretched(source: Path, target: Path, span: dt.timedelta) -> tuple[dt.datetime, dt.datetime]:
    """``source``'s tables over ``span`` from START: a minute is the capture itself, its packet times
    stretched to it (START + (t - first) * span / (last - first)); a week is eight copies of it, one
    a day (captures `day0`...`day7`, each starting at START + that many days). The first and last
    packet time."""
    tables = {
        name: [(path, pq.read_table(path)) for path in sorted((source / name).glob("*.parquet"))]
        for name in TABLES
    }
    known = [
        v
        for files in tables.values()
        for _, t in files
        for c in packet_times(t)
        for v in pc.cast(t.column(c), pa.int64()).to_pylist()
        if v is not None
    ]
    first, last = min(known), max(known)
    start_us = int(START.timestamp() * 1_000_000)
    day_us = 86_400_000_000
    if span < dt.timedelta(days=1):
        copies, scale = [("", 0)], span / dt.timedelta(microseconds=last - first)
    else:
        copies, scale = [(f"day{d}-", d * day_us) for d in range(span.days + 1)], 1.0
    for name, files in tables.items():
        (target / name).mkdir(parents=True)
        for path, table in files:
            for prefix, shift in copies:
                copy = table
                for column in packet_times(table):
                    raw = pc.cast(table.column(column), pa.int64()).to_pylist()
                    moved = [
                        None if v is None else start_us + shift + round((v - first) * scale) for v in raw
                    ]
                    field = table.schema.field(column)
                    at = table.schema.get_field_index(column)
                    copy = copy.set_column(at, field, pa.array(moved, pa.int64()).cast(field.type))
                captures = pa.array([prefix + c for c in table.column("capture").to_pylist()], pa.string())
                copy = copy.set_column(copy.schema.get_field_index("capture"), "capture", captures)
                pq.write_table(copy, target / name / f"{prefix}{path.name}")
    end = dt.timedelta(microseconds=copies[-1][1] + round((last - first) * scale))
    return START, START + end


@pytest.fixture(scope="module", params=sorted(SPANS))
def drawn(request: Any, quickstart: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The report of the stretched tables as HTML, its screenshot in Chromium, and per figure (by
    title) its axes as drawn: limits, scale and the labels of the ticks inside the limits."""
    name = request.param
    tmp = tmp_path_factory.mktemp(name)
    tables = tmp / "tables"
    first, last = stretched(quickstart, tables, SPANS[name])
    axes: dict[str, dict[str, Any]] = {}
    draw_png = figures._png

    def record(fig: Any) -> bytes:
        fig.canvas.draw()  # tick labels are made when drawn
        (ax,) = fig.axes
        axes[ax.get_title()] = {
            "xlim": ax.get_xlim(),
            "ylim": ax.get_ylim(),
            "xscale": ax.get_xscale(),
            "xticks": visible_labels(ax.xaxis, ax.get_xlim()),
            "yticks": visible_labels(ax.yaxis, ax.get_ylim()),
        }
        return draw_png(fig)

    html = tmp / "report.html"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(figures, "_png", record)
        done = CliRunner().invoke(main, ["report", str(tables), "--html", str(html)])
    assert done.exit_code == 0, done.output
    shot = tmp / "report.png"
    chromium = shutil.which("chromium")
    assert chromium, "chromium missing: tools/install-test-deps.sh installs it"
    subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
        + ["--window-size=1280,16000", f"--screenshot={shot}", html.as_uri()],
        capture_output=True,
        timeout=120,
        check=True,
    )
    return {"name": name, "tables": tables, "html": html, "shot": shot, "axes": axes, "span": (first, last)}


def visible_labels(axis: Any, limits: tuple[float, float]) -> list[str]:
    lo, hi = sorted(limits)
    ticks = [*axis.get_major_ticks(), *axis.get_minor_ticks()]
    return [t.label1.get_text() for t in ticks if lo <= t.get_loc() <= hi and t.label1.get_text()]


def utc(number: float) -> dt.datetime:
    import matplotlib.dates as mdates

    return mdates.num2date(number, tz=dt.UTC)


def one(axes: dict[str, Any], start: str) -> dict[str, Any]:
    (found,) = [a for title, a in axes.items() if title.startswith(start)]
    return found


def frame(tables: Path, table: str) -> Any:
    return pq.read_table(tables / table).to_pandas()


def check_time_axis(ax: dict[str, Any], name: str, lo: dt.datetime, hi: dt.datetime) -> None:
    """The axis holds the data from ``lo`` to ``hi`` with a margin of at most 5% of the span (or of
    figures.MIN_SPAN), its ticks are labelled in the span's one format, in order and each once."""
    left, right = utc(ax["xlim"][0]), utc(ax["xlim"][1])
    margin = max(hi - lo, figures.MIN_SPAN) * 0.05 + (figures.MIN_SPAN - min(hi - lo, figures.MIN_SPAN)) / 2
    assert lo - margin <= left <= lo and hi <= right <= hi + margin, (left, right, lo, hi)
    labels = ax["xticks"]
    assert 3 <= len(labels) <= 10, labels
    pattern = next(p for most, p in TICKS if hi - lo < most)
    # A minute of data shows seconds; a week shows days.
    assert pattern == {"minute": TICKS[0][1], "week": TICKS[-1][1]}[name]
    assert all(re.fullmatch(pattern, label) for label in labels), labels
    assert labels == sorted(set(labels)), labels
    assert ax["ylim"][0] == 0.0 and ax["ylim"][1] > 0
    assert all(PLAIN.fullmatch(label) for label in ax["yticks"]), ax["yticks"]


def test_throughput_spans_the_minutes_produced_in(drawn: dict) -> None:
    parts = frame(drawn["tables"], "partitions")
    produced = parts[parts["api_key"] == 0]["ts_request"]
    # Per minute: from the first Produce's minute to the end of the last one's.
    lo = produced.min().floor("min").to_pydatetime()
    hi = produced.max().floor("min").to_pydatetime() + dt.timedelta(minutes=1)
    check_time_axis(one(drawn["axes"], "Records produced per topic"), drawn["name"], lo, hi)


def test_lag_spans_the_commits_and_what_came_after(drawn: dict) -> None:
    parts = frame(drawn["tables"], "partitions")
    commits = parts[(parts["api_key"] == 8) & (parts["committed_offset"] >= 0)]["ts_request"]
    # From the first commit's second to the last event on the partitions (a watermark or commit).
    lo = commits.min().floor("s").to_pydatetime()
    ax = one(drawn["axes"], "Consumer lag in seconds")
    last_event = max(parts["ts_request"].max(), parts["ts_response"].max()).to_pydatetime()
    last_commit = commits.max().floor("s").to_pydatetime()
    check_time_axis(ax, drawn["name"], lo, max(last_commit, min(utc(ax["xlim"][1]), last_event)))
    assert utc(ax["xlim"][1]) <= last_event + max(last_event - lo, figures.MIN_SPAN) * 0.05 + figures.MIN_SPAN


@pytest.mark.parametrize("title", ["Produce latency per topic", "Request latency, long polls apart"])
def test_latency_bars_read_as_plain_numbers(drawn: dict, title: str) -> None:
    ax = one(drawn["axes"], title)
    assert ax["xscale"] == "log"
    assert len(ax["xticks"]) >= 2 and all(PLAIN.fullmatch(label) for label in ax["xticks"]), ax["xticks"]


def test_the_page_shows_the_four_plots_in_chromium(drawn: dict) -> None:
    import matplotlib.image as mpimg

    assert drawn["html"].read_text().count("data:image/png;base64,") == 4 == len(drawn["axes"])
    pixels = mpimg.imread(drawn["shot"])[:, :, :3]
    # matplotlib's first line colour (C0 blue #1f77b4): the lines and bars drawn on the page.
    near = (abs(pixels * 255 - (0x1F, 0x77, 0xB4)) < 12).all(axis=2)
    assert near.sum() > 500
