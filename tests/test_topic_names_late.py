"""Topic ids named at report time (issue 48, goal 6): rows written before their topic id's name was
learned take the name any Metadata of the dataset gives it, and a count the report cannot know is
null, never 0.

The case of `capture --workers N` attached mid-stream, made from the bundled quick start: the
fanout gives the confluent consumer's fetch connection to one worker, attached after that
connection's own Metadata (its first packet at 17:39:37.700), and every other connection to the
other worker, which sees the Metadata naming `events`. The first worker's Fetch v16 rows (topic ids,
KIP-516) are written without a name; both workers write the one capture, `quickstart.pcap`.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import dpkt
import pytest
from report_engines import answer_sections

from kwsniff.pipeline.run import run_capture
from kwsniff.pipeline.session import SessionOptions
from kwsniff.sinks.parquet import ParquetSink

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "sample_pcaps/quickstart.pcap"
FETCHER_PORT = 56092  # the client port of qs-consumer-confluent's fetch connection
PRODUCE_PORTS = {51838, 51864, 51874}  # the producers' Produce connections (no Metadata on them)
ATTACHED = dt.datetime(2026, 11, 22, 17, 39, 37, 700_000, tzinfo=dt.UTC).timestamp()
EVENTS_ID = "01a20457-6bf7-7fc2-a8a3-42a50ed82c7e"
CONSUMER = "qs-consumer-confluent"
SECTIONS = ["inventory", "member_lag", "produce_to_consume"]


def split(target: Path) -> tuple[Path, Path, Path]:
    """The quick start as two workers' captures: the fetch connection from ATTACHED on, and the rest;
    and the producers' Produce connections alone."""
    fetcher, others, producers = target / "fetcher.pcap", target / "others.pcap", target / "producers.pcap"
    with (
        QUICKSTART.open("rb") as f,
        fetcher.open("wb") as a,
        others.open("wb") as b,
        producers.open("wb") as c,
    ):
        reader = dpkt.pcap.Reader(f)
        wa, wb, wc = (
            dpkt.pcap.Writer(w, snaplen=reader.snaplen, linktype=reader.datalink()) for w in (a, b, c)
        )
        for ts, frame in reader:
            tcp = dpkt.ethernet.Ethernet(frame).data.data
            if FETCHER_PORT in (tcp.sport, tcp.dport):
                if ts >= ATTACHED:
                    wa.writepkt(frame, ts)
            else:
                wb.writepkt(frame, ts)
                if PRODUCE_PORTS & {tcp.sport, tcp.dport}:
                    wc.writepkt(frame, ts)
    return fetcher, others, producers


def decoded(out: Path, *pieces: tuple[Path, str]) -> Path:
    """Each (capture file, file stem) decoded into ``out`` as the capture `quickstart.pcap`."""
    for path, stem in pieces:
        with ParquetSink(out, stem) as sink:
            run_capture(path, sink, SessionOptions(), name="quickstart.pcap")
    return out


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("names")
    fetcher, others, producers = split(root)
    return {
        "whole": decoded(root / "whole", (QUICKSTART, "whole")),
        "workers": decoded(root / "workers", (fetcher, "worker-0"), (others, "worker-1")),
        "fetcher": decoded(root / "fetcher", (fetcher, "worker-0")),
        "unnamed": decoded(root / "unnamed", (fetcher, "worker-0"), (producers, "worker-1")),
    }


def fetch_topics(tables: Path) -> list[tuple[str | None, str | None]]:
    import pyarrow.dataset as ds

    rows = ds.dataset(tables / "partitions").to_table(filter=ds.field("api_key") == 1).to_pylist()
    return sorted({(r["topic"], r["topic_id"]) for r in rows if r["client_id"] == CONSUMER}, key=str)


def consumer_rows(answer: dict[str, list[dict[str, Any]]]) -> dict[str, list[tuple[Any, ...]]]:
    return {
        "inventory": [
            (r["role"], r["topic"], r["group_id"], r["records"], r["bytes"], r["requests"])
            for r in answer["inventory"]
            if r["client_id"] == CONSUMER
        ],
        "member_lag": [
            (r["group_id"], r["topic"], r["partition"], r["position"], r["high_watermark"], r["offset_lag"])
            for r in answer["member_lag"]
            if r["client_id"] == CONSUMER
        ],
        "produce_to_consume": [(r["topic"], r["batches"], r["p50_ms"]) for r in answer["produce_to_consume"]],
    }


def test_the_workers_fetch_rows_are_written_without_the_name(datasets: dict[str, Path]) -> None:
    """The premise: the fetching worker never saw a Metadata naming the id, the whole capture did."""
    assert fetch_topics(datasets["workers"]) == [(None, EVENTS_ID)]
    assert fetch_topics(datasets["whole"]) == [("events", EVENTS_ID)]


@pytest.mark.parametrize("engine_name", ["duckdb", "spark"])
def test_rows_written_before_the_name_take_it_from_any_metadata_of_the_dataset(
    datasets: dict[str, Path], engine_name: str, request: pytest.FixtureRequest
) -> None:
    workers = consumer_rows(answer_sections(datasets["workers"], SECTIONS, engine_name, request))
    # What the report says of the capture decoded whole, by hand: 60 records (823 bytes) of `events`
    # in 3 Fetch, 2 ListOffsets and 1 OffsetFetch; each partition fetched up to its watermark 30; the
    # zstd producer's 2 batches seen consumed.
    assert workers == {
        "inventory": [("consumer", "events", "quickstart-audit", 60, 823, 6)],
        "member_lag": [
            ("quickstart-audit", "events", 0, 30, 30, 0),
            ("quickstart-audit", "events", 1, 30, 30, 0),
        ],
        "produce_to_consume": [("events", 2, 9864.384), ("orders", 6, 5144.192)],
    }
    assert workers == consumer_rows(answer_sections(datasets["whole"], SECTIONS, "duckdb", request))


def test_records_of_a_topic_no_row_names_are_unknown_not_zero(
    datasets: dict[str, Path], request: pytest.FixtureRequest
) -> None:
    alone = consumer_rows(answer_sections(datasets["fetcher"], SECTIONS, "duckdb", request))
    # Its 2 ListOffsets name `events`; its 3 Fetch name an id only: how many records of `events` it
    # fetched cannot be told, nor those of the unnamed id's (its member, in the other worker, is not here).
    assert alone == {
        "inventory": [("consumer", "events", None, None, None, 2), ("consumer", None, None, None, None, 3)],
        "member_lag": [],
        "produce_to_consume": [],
    }


@pytest.mark.parametrize("engine_name", ["duckdb", "spark"])
def test_batches_consumed_in_a_capture_with_unnamed_fetches_are_unknown_not_a_short_count(
    datasets: dict[str, Path], engine_name: str, request: pytest.FixtureRequest
) -> None:
    # The producers of `events` and `orders` with the fetcher, and no Metadata: its 60 records of
    # `events` are in Fetch rows of an id only, so how many batches of either topic were consumed
    # cannot be told.
    answer = answer_sections(datasets["unnamed"], SECTIONS, engine_name, request)
    assert [(r["topic"], r["batches"], r["p50_ms"]) for r in answer["produce_to_consume"]] == [
        ("events", None, None),
        ("orders", None, None),
    ]
    assert [
        (r["role"], r["topic"], r["records"]) for r in answer["inventory"] if r["client_id"] == CONSUMER
    ] == [
        ("consumer", "events", None),
        ("consumer", None, None),
    ]
