"""The report's plots stay readable for one minute and for one week of data, and for real datasets:
the quick start's tables stretched to a minute, or copied once a day for a week; the repository's
captures with one shifted two weeks (`editcap -t`), several groups and captures lying days apart; a
capture stretched over minutes it begins and ends inside. Each through `report --html` (rendered in
headless Chromium). Each figure's axes, lines and legends are read from the figure the report draws
and held against the tables' own times (pandas) and the captures' packet times (read from the pcap
files here): a time axis spans its data and no more, one per capture lying apart, counts start at 0,
every time tick is labelled alike for the span, logarithmic axes read as plain numbers, the lag has
one row of panels per group holding only that group's partitions, the throughput's partial minutes
are drawn apart from its line, and no legend covers data."""

from __future__ import annotations

import datetime as dt
import re
import shutil
import struct
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from kwsniff.cli import main
from kwsniff.sections import figures

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "sample_pcaps/quickstart.pcap"
CAPTURES = ROOT / "tests/data/captures"
START = dt.datetime(2026, 3, 2, 8, 0, 0, tzinfo=dt.UTC)
# The quick start stretched to a minute, or eight copies of it a day apart (a week).
SPANS: dict[str, dict[str, Any]] = {
    "minute": {"span": dt.timedelta(minutes=1)},
    "week": {"span": None, "copies": 8},
}
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
MINUTE = dt.timedelta(minutes=1)
FORTNIGHT = dt.timedelta(days=14)


def packet_times(table: pa.Table) -> list[str]:
    """Its columns of capture time (every timestamp but `captures.started`, a wall clock)."""
    return [f.name for f in table.schema if pa.types.is_timestamp(f.type) and f.name != "started"]


def pcap_span(path: Path) -> tuple[int, int]:
    """The first and last packet time of a classic pcap file (µs), from its record headers."""
    data = path.read_bytes()
    magic = data[:4]
    order = {b"\xd4\xc3\xb2\xa1": "<", b"\xa1\xb2\xc3\xd4": ">"}[magic]  # microsecond pcap only
    at, times = 24, []
    while at + 16 <= len(data):
        sec, usec, caplen, _ = struct.unpack(order + "IIII", data[at : at + 16])
        times.append(sec * 1_000_000 + usec)
        at += 16 + caplen
    return min(times), max(times)


def utc_us(us: int) -> dt.datetime:
    return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=us)


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return read_tables(tmp_path_factory.mktemp("qs") / "tables", QUICKSTART)


def read_tables(out: Path, *captures: Path) -> Path:
    done = CliRunner().invoke(main, ["read", "-q", *map(str, captures), "--out", str(out)])
    assert done.exit_code == 0, done.output
    return out


@dataclass(frozen=True)
class Stretch:
    """How `stretched` moved packet times: ``move`` of a time (µs) of the source into a copy, and the
    first and last of the tables' times after it."""

    move: Callable[[int, int], int]
    first: dt.datetime
    last: dt.datetime


def stretched(
    source: Path,
    target: Path,
    span: dt.timedelta | None,
    begin: dt.datetime = START,
    copies: int = 1,
    every: dt.timedelta = dt.timedelta(days=1),
) -> Stretch:
    """``copies`` copies of ``source``'s tables, the k-th from ``begin`` + k * ``every`` (captures
    `copy0-`... when more than one), each the capture's packet times stretched to ``span``
    (begin + (t - first) * span / (last - first)) or, without one, as they were."""
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
    start_us = int(begin.timestamp() * 1_000_000)
    every_us = every // dt.timedelta(microseconds=1)
    scale = 1.0 if span is None else span / dt.timedelta(microseconds=last - first)

    def move(v: int, copy: int = 0) -> int:
        return start_us + copy * every_us + round((v - first) * scale)

    for name, files in tables.items():
        (target / name).mkdir(parents=True)
        for path, table in files:
            for k in range(copies):
                prefix = f"copy{k}-" if copies > 1 else ""
                copy = table
                for column in packet_times(table):
                    raw = pc.cast(table.column(column), pa.int64()).to_pylist()
                    moved = [None if v is None else move(v, k) for v in raw]
                    field = table.schema.field(column)
                    at = table.schema.get_field_index(column)
                    copy = copy.set_column(at, field, pa.array(moved, pa.int64()).cast(field.type))
                captures = pa.array([prefix + c for c in table.column("capture").to_pylist()], pa.string())
                copy = copy.set_column(copy.schema.get_field_index("capture"), "capture", captures)
                pq.write_table(copy, target / name / f"{prefix}{path.name}")
    return Stretch(move, utc_us(move(first)), utc_us(move(last, copies - 1)))


def bbox(artist: Any, renderer: Any) -> tuple[float, float, float, float]:
    box = artist.get_window_extent(renderer)
    return (box.x0, box.y0, box.x1, box.y1)


def record_figure(fig: Any) -> dict[str, Any]:
    """A figure as drawn: its title, and per axes its place in the grid, limits, scale, the labels
    of the ticks inside the limits, its lines and hatched bands, and window boxes of it and of its
    legend."""
    fig.canvas.draw()  # tick labels are made when drawn
    renderer = fig.canvas.get_renderer()
    title = fig._suptitle.get_text() if fig._suptitle is not None else fig.axes[0].get_title()
    axes = []
    for ax in fig.axes:
        spec = ax.get_subplotspec()
        lines = [
            {
                "label": line.get_label(),
                "gid": line.get_gid(),
                "colour": line.get_color(),
                "x": [when(x) for x in line.get_xdata()],
                "y": [float(y) for y in line.get_ydata()],
            }
            for line in ax.get_lines()
        ]
        bands = [
            (utc(p.get_x()), utc(p.get_x() + p.get_width()))
            for p in ax.patches
            if p.get_gid() == "partial minute"
        ]
        legend = ax.get_legend()
        axes.append(
            {
                "row": spec.rowspan.start,
                "col": spec.colspan.start,
                "title": ax.get_title(loc="left") or ax.get_title(),
                "xlim": ax.get_xlim(),
                "ylim": ax.get_ylim(),
                "xscale": ax.get_xscale(),
                "xlabel": ax.get_xlabel(),
                "xticks": visible_labels(ax.xaxis, ax.get_xlim()),
                "yticks": visible_labels(ax.yaxis, ax.get_ylim()),
                "lines": lines,
                "bands": bands,
                "box": bbox(ax, renderer),
                "legend": None
                if legend is None
                else {"box": bbox(legend, renderer), "texts": [t.get_text() for t in legend.get_texts()]},
            }
        )
    return {"title": title, "axes": axes}


def render(tables: Path, tmp: Path) -> dict[str, Any]:
    """The report of ``tables`` as HTML, its screenshot in Chromium, and its figures as drawn
    (record_figure) by title."""
    drawn: dict[str, dict[str, Any]] = {}
    draw_png = figures._png

    def record(fig: Any) -> bytes:
        found = record_figure(fig)
        drawn[found["title"]] = found
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
    return {"tables": tables, "html": html, "shot": shot, "figures": drawn}


@pytest.fixture(scope="module", params=sorted(SPANS))
def drawn(request: Any, quickstart: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The report of the stretched quick start (render), its span's name and first and last time."""
    name = request.param
    tmp = tmp_path_factory.mktemp(name)
    stretch = stretched(quickstart, tmp / "tables", **SPANS[name])
    return {**render(tmp / "tables", tmp), "name": name, "span": (stretch.first, stretch.last)}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Three captures of three groups read into one dataset: produce_codecs and the quick start half an
    hour apart, kafka_python shifted two weeks later by `editcap -t`. Per capture its pcap file."""
    tmp = tmp_path_factory.mktemp("fleet")
    later = tmp / "kafka_python.pcap"
    shift = str(int(FORTNIGHT.total_seconds()))
    subprocess.run(
        ["editcap", "-F", "pcap", "-t", shift, str(CAPTURES / "kafka_python.pcap"), str(later)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    pcaps = {"produce_codecs.pcap": CAPTURES / "produce_codecs.pcap", "quickstart.pcap": QUICKSTART}
    pcaps["kafka_python.pcap"] = later
    tables = read_tables(tmp / "tables", *pcaps.values())
    return {**render(tables, tmp), "pcaps": pcaps}


@pytest.fixture(scope="module")
def partial(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """acks_modes (records produced at its start and end) as a run rotated into four captures of a
    minute each, back to back from 08:00:20: copies of it, each stretched to a minute. The run's
    first and last minutes are partial, the three between them whole. The run's span: the pcap's
    first packet moved into the first copy, its last into the last."""
    tmp = tmp_path_factory.mktemp("partial")
    pcap = CAPTURES / "acks_modes.pcap"
    tables = read_tables(tmp / "read", pcap)
    stretch = stretched(tables, tmp / "tables", MINUTE, START + dt.timedelta(seconds=20), 4, MINUTE)
    first, last = pcap_span(pcap)
    return {
        **render(tmp / "tables", tmp),
        "span": (utc_us(stretch.move(first, 0)), utc_us(stretch.move(last, 3))),
    }


def visible_labels(axis: Any, limits: tuple[float, float]) -> list[str]:
    lo, hi = sorted(limits)
    ticks = [*axis.get_major_ticks(), *axis.get_minor_ticks()]
    return [
        t.label1.get_text()
        for t in ticks
        if lo <= t.get_loc() <= hi and t.label1.get_text() and t.label1.get_visible()
    ]


def when(x: Any) -> Any:
    """A line's x as drawn: a time in UTC (a number when the axis is not of time)."""
    if isinstance(x, dt.datetime):
        return x if x.tzinfo is not None else x.replace(tzinfo=dt.UTC)
    return x


def utc(number: float) -> dt.datetime:
    import matplotlib.dates as mdates

    return mdates.num2date(number, tz=dt.UTC)


def one(figs: dict[str, Any], start: str) -> dict[str, Any]:
    (found,) = [f for title, f in figs.items() if title.startswith(start)]
    return found


def only_axes(fig: dict[str, Any]) -> dict[str, Any]:
    (ax,) = fig["axes"]
    return ax


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
    check_time_axis(only_axes(one(drawn["figures"], "Records produced per topic")), drawn["name"], lo, hi)


def test_lag_spans_the_commits_and_what_came_after(drawn: dict) -> None:
    parts = frame(drawn["tables"], "partitions")
    commits = parts[(parts["api_key"] == 8) & (parts["committed_offset"] >= 0)]["ts_request"]
    # From the first commit's second to the last event on the partitions (a watermark or commit).
    lo = commits.min().floor("s").to_pydatetime()
    ax = only_axes(one(drawn["figures"], "Consumer lag in seconds"))
    last_event = max(parts["ts_request"].max(), parts["ts_response"].max()).to_pydatetime()
    last_commit = commits.max().floor("s").to_pydatetime()
    check_time_axis(ax, drawn["name"], lo, max(last_commit, min(utc(ax["xlim"][1]), last_event)))
    assert utc(ax["xlim"][1]) <= last_event + max(last_event - lo, figures.MIN_SPAN) * 0.05 + figures.MIN_SPAN


@pytest.mark.parametrize("title", ["Produce latency per topic", "Request latency, long polls apart"])
def test_latency_bars_read_as_plain_numbers(drawn: dict, title: str) -> None:
    ax = only_axes(one(drawn["figures"], title))
    assert ax["xscale"] == "log"
    assert len(ax["xticks"]) >= 2 and all(PLAIN.fullmatch(label) for label in ax["xticks"]), ax["xticks"]


def shows_plots(report: dict[str, Any]) -> None:
    import matplotlib.image as mpimg

    assert report["html"].read_text().count("data:image/png;base64,") == len(report["figures"])
    pixels = mpimg.imread(report["shot"])[:, :, :3]
    # matplotlib's first line colour (C0 blue #1f77b4): the lines and bars drawn on the page.
    near = (abs(pixels * 255 - (0x1F, 0x77, 0xB4)) < 12).all(axis=2)
    assert near.sum() > 500


def test_the_page_shows_the_four_plots_in_chromium(drawn: dict) -> None:
    assert len(drawn["figures"]) == 4
    shows_plots(drawn)


def overlap(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def legends_clear_of_the_data(report: dict[str, Any]) -> None:
    """No legend of any figure covers any axes of it; every figure with lines or bars has one."""
    for title, fig in report["figures"].items():
        legends = [ax["legend"] for ax in fig["axes"] if ax["legend"] is not None]
        assert legends, title
        for legend in legends:
            for ax in fig["axes"]:
                assert not overlap(legend["box"], ax["box"]), (title, legend, ax["box"])


def test_no_legend_covers_data(drawn: dict, fleet: dict) -> None:
    legends_clear_of_the_data(drawn)
    legends_clear_of_the_data(fleet)


# The fleet: three captures, three groups, days apart.


def capture_spans(fleet: dict) -> Any:
    """Per capture its first and last packet (the pcap files'), by capture name, in time order."""
    spans = {name: tuple(map(utc_us, pcap_span(path))) for name, path in fleet["pcaps"].items()}
    return dict(sorted(spans.items(), key=lambda kv: kv[1]))


def test_the_lag_has_one_row_of_panels_per_group_holding_only_its_partitions(fleet: dict) -> None:
    parts = frame(fleet["tables"], "partitions")
    commits = parts[(parts["api_key"] == 8) & (parts["committed_offset"] >= 0)]
    partitions = {
        group: sorted({f"{t}[{p}]" for t, p in zip(rows["topic"], rows["partition"], strict=True)})
        for group, rows in commits.groupby("group_id")
    }
    assert len(partitions) == 3 <= figures.LAG_PANELS
    fig = one(fleet["figures"], "Consumer lag in seconds")
    assert fig["title"] == "Consumer lag in seconds per group and partition"  # no group left out
    rows: dict[int, list[dict]] = {}
    for ax in fig["axes"]:
        rows.setdefault(ax["row"], []).append(ax)
    assert len(rows) == len(partitions)
    top = 8  # the report's default number of series
    for row in rows.values():
        (group,) = {ax["title"] for ax in row if ax["col"] == 0}
        mine = partitions[group]
        labels = {line["label"] for ax in row for line in ax["lines"]}
        other = f"other ({len(mine) - top}): their largest"
        assert labels <= set(mine) | {other} and len(labels - {other}) == min(len(mine), top), (group, labels)
        (legend,) = [ax["legend"] for ax in row if ax["legend"] is not None]
        assert set(legend["texts"]) == labels
        if len(mine) > top:
            assert legend["texts"][-1] == other


def test_captures_lying_apart_get_a_time_axis_each(fleet: dict) -> None:
    spans = list(capture_spans(fleet).values())
    # Half an hour apart the same day, then two weeks later: each further apart than both are long.
    assert spans[1][0] - spans[0][1] > dt.timedelta(minutes=20) and spans[2][0] - spans[1][1] > FORTNIGHT / 2
    parts = frame(fleet["tables"], "partitions")
    produced = parts[parts["api_key"] == 0]["ts_request"]
    fig = one(fleet["figures"], "Records produced per topic")
    columns = sorted(fig["axes"], key=lambda ax: ax["col"])
    assert len(columns) == len(spans)
    for ax, (first, last) in zip(columns, spans, strict=True):
        # Exactly the minutes produced in within the capture (figures._utc_axis's margin).
        minutes = produced[(produced >= first) & (produced <= last)].dt.floor("min")
        lo, hi = minutes.min().to_pydatetime(), minutes.max().to_pydatetime() + MINUTE
        span = max(hi - lo, figures.MIN_SPAN)
        pad = (span - (hi - lo)) / 2 + span * 0.02
        assert [utc(x) for x in ax["xlim"]] == pytest.approx(
            [lo - pad, hi + pad], abs=dt.timedelta(microseconds=1)
        )
        assert all(first - MINUTE <= x <= last + MINUTE for line in ax["lines"] for x in line["x"])
    lag = one(fleet["figures"], "Consumer lag in seconds")
    for ax in lag["axes"]:
        first, last = spans[ax["col"]]
        left, right = utc(ax["xlim"][0]), utc(ax["xlim"][1])
        # Within its capture, up to the margin of a time axis of at least figures.MIN_SPAN.
        assert first - figures.MIN_SPAN <= left and right <= last + figures.MIN_SPAN, (
            left,
            right,
            first,
            last,
        )
        assert all(left <= x <= right for line in ax["lines"] for x in line["x"])
    bottom = [ax for ax in lag["axes"] if ax["row"] == max(a["row"] for a in lag["axes"])]
    dates = [ax["xlabel"] for ax in sorted(bottom, key=lambda ax: ax["col"])]
    assert dates == [f"time (UTC) on {first:%Y-%m-%d}" for first, _ in spans]


def test_the_fleet_page_shows_its_plots_in_chromium(fleet: dict) -> None:
    assert len(fleet["figures"]) == 4
    shows_plots(fleet)


def test_only_the_groups_with_the_largest_lag_get_panels_and_the_rest_are_counted(
    fleet: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lag = frame(fleet["tables"], "partitions")
    commits = lag[(lag["api_key"] == 8) & (lag["committed_offset"] >= 0)]
    groups = commits["group_id"].nunique()
    monkeypatch.setattr(figures, "LAG_PANELS", 2)
    report = render(fleet["tables"], tmp_path)
    fig = one(report["figures"], "Consumer lag in seconds")
    assert len({ax["row"] for ax in fig["axes"]}) == 2
    assert fig["title"].endswith(
        f"\nthe 2 groups with the largest lag; {groups - 2} more group in the lag table"
    )


# A capture beginning and ending inside minutes.


def test_the_throughput_draws_partial_minutes_apart_from_its_line(partial: dict) -> None:
    first, last = partial["span"]
    parts = frame(partial["tables"], "partitions")
    produced = parts[parts["api_key"] == 0].assign(minute=lambda f: f["ts_request"].dt.floor("min"))
    per_minute = produced.groupby(["topic", "minute"])["record_count"].sum()
    whole = {m for m in per_minute.index.get_level_values(1) if first <= m and m + MINUTE <= last}
    cut = set(per_minute.index.get_level_values(1)) - whole
    # 08:00:20 to 08:04:20: the first and last minutes are partial, three between them whole.
    assert sorted(cut) == [
        pd.Timestamp("2026-03-02 08:00", tz="UTC"),
        pd.Timestamp("2026-03-02 08:04", tz="UTC"),
    ]
    assert len(whole) == 3
    ax = only_axes(one(partial["figures"], "Records produced per topic"))
    assert sorted(ax["bands"]) == [(m.to_pydatetime(), m.to_pydatetime() + MINUTE) for m in sorted(cut)]
    lines = {(line["label"], line["gid"]): line for line in ax["lines"] if line["gid"] == "whole"}
    for topic in per_minute.index.get_level_values(0).unique():
        counts = per_minute[topic]
        # The line: the whole minutes' counts as steps, the last held to its minute's end.
        line = lines[(topic, "whole")]
        expected = sorted((m.to_pydatetime(), float(n)) for m, n in counts.items() if m in whole)
        assert list(zip(line["x"], line["y"], strict=True)) == [
            *expected,
            (expected[-1][0] + MINUTE, expected[-1][1]),
        ]
        # Each partial minute: a dashed step of its own in the topic's colour, never on the line.
        dashes = sorted(
            (dash["x"][0], dash["y"][0])
            for dash in ax["lines"]
            if dash["gid"] == "partial" and dash["colour"] == line["colour"]
        )
        assert dashes == sorted((m.to_pydatetime(), float(n)) for m, n in counts.items() if m in cut)
    assert figures.PARTIAL in ax["legend"]["texts"]


def test_the_partial_page_shows_its_plots_in_chromium(partial: dict) -> None:
    legends_clear_of_the_data(partial)
    shows_plots(partial)


def test_capture_spans_get_axes_of_their_own_only_when_apart() -> None:
    from kwsniff.sections.capture_spans import Spans, spans

    day = dt.timedelta(days=1)

    def of(*pairs: tuple[dt.datetime, dt.datetime]) -> Spans:
        return spans([{"ts_begin": a, "ts_end": b} for a, b in pairs], None, None)

    # Two days two weeks apart: an axis each; files of one run half a second apart: one, covered.
    apart = of((START, START + day), (START + FORTNIGHT, START + FORTNIGHT + day))
    assert apart.axes == ((START, START + day), (START + FORTNIGHT, START + FORTNIGHT + day))
    half = dt.timedelta(milliseconds=500)
    rotated = of((START, START + MINUTE), (START + MINUTE + half, START + 2 * MINUTE))
    assert rotated.axes == rotated.covered == ((START, START + 2 * MINUTE),)
    # Closer than the longest capture: one axis, two covered stretches.
    near = of((START, START + day), (START + day + dt.timedelta(hours=1), START + 2 * day))
    assert len(near.axes) == 1 and len(near.covered) == 2
    # Five stretches a day apart: one axis, a trend.
    daily = of(*[(START + k * day, START + k * day + MINUTE) for k in range(5)])
    assert daily.axes == ((START, START + 4 * day + MINUTE),)
    # A minute is whole up to the microsecond its capture ends; points go to the nearest stretch
    # (from halfway between them, the later).
    us = dt.timedelta(microseconds=1)
    assert rotated.whole(START + MINUTE) and not of((START, START + 2 * MINUTE - us)).whole(START + MINUTE)
    assert not rotated.whole(START - us)
    middle = START + day + (FORTNIGHT - day) / 2
    xs = [START - MINUTE, START + day, middle - us, middle, START + FORTNIGHT]
    assert apart.split(xs, [1.0, 2, 3, 4, 5]) == {0: (xs[:3], [1.0, 2, 3]), 1: (xs[3:], [4, 5])}
