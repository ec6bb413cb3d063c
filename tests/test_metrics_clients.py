"""The metrics labelled by client id and the capture's metrics about itself (issue 48, goals 3 and 7).

Per-client series are checked against the tables `kwsniff read` writes of the same repository
captures, and the per-client errors against the report's `errors` section (its `failure` rows):
one rule of which codes are expected. The endpoint is scraped over HTTP, as Prometheus does."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from click.testing import CliRunner

from kwsniff.capture.live import CaptureCounters
from kwsniff.cli import main
from kwsniff.pipeline.run import run_capture
from kwsniff.pipeline.session import Session, SessionOptions
from kwsniff.rows import ListSink
from kwsniff.sinks import Output
from kwsniff.view.metrics import LATENCY_BUCKETS_S, Metrics
from kwsniff.view.stats import LiveStats, Pending, StatsSink
from tests.kafkawire import (
    LINKTYPE_RAW_IPV4,
    METADATA_V0_REQUEST,
    METADATA_V0_RESPONSE,
    Flow,
    request,
    response,
)
from tests.realparts import (
    CAPTURE_READY_TIMEOUT_S,
    CAPTURE_STOP_TIMEOUT_S,
    free_ports,
    stop_process,
    wait_until,
)

CAPTURES = Path(__file__).parent / "data" / "captures"
# Three clients' captures: a consumer group's MEMBER_ID_REQUIRED (expected, KIP-394), two producers'
# UNKNOWN_PRODUCER_ID (failures), Produce and Fetch of several topics by many client ids.
NAMES = ("kafka_python.pcap", "legacy_msgset.pcap", "produce_codecs.pcap")


def scraped(text: str) -> dict[str, float]:
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("kwsniff_")
    }


def series(values: dict[str, float], name: str) -> dict[str, float]:
    """The samples of metric ``name`` (exactly: not its histogram's or a longer name's)."""
    return {k: v for k, v in values.items() if k.startswith(name + "{")}


def scrape(port: int) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()


def test_per_client_series_equal_the_tables_and_the_reports_failures(tmp_path: Path) -> None:
    captures = [str(CAPTURES / name) for name in NAMES]
    out = tmp_path / "out"
    runner = CliRunner()
    read = runner.invoke(main, ["read", *captures, "--out", str(out), "-q"])
    report = runner.invoke(main, ["report", str(out), "--section", "errors", "--format", "json"])
    assert (read.exit_code, report.exit_code) == (0, 0), read.output + report.output
    requests = ds.dataset(out / "requests").to_table().to_pylist()
    partitions = ds.dataset(out / "partitions").to_table().to_pylist()

    stats = LiveStats(collect_pending=True)
    for capture in captures:
        run_capture(Path(capture), StatsSink(ListSink(), stats), SessionOptions())
    metrics = Metrics()
    metrics.update(CaptureCounters(), stats.take_pending(), 0)
    values = scraped(scrape_registry(metrics))

    by_request = Counter((r["client_id"], r["api_name"]) for r in requests)
    assert len({client for client, _api in by_request}) == 15
    assert series(values, "kwsniff_client_requests_total") == {
        f'kwsniff_client_requests_total{{api="{api}",client_id="{client}"}}': float(n)
        for (client, api), n in by_request.items()
    }
    # Every bucket of every client's latency histogram counts the rows at or under its bound.
    latencies = [
        (r["client_id"], r["api_name"], r["latency_ms"] / 1000)
        for r in requests
        if r["latency_ms"] is not None
    ]
    buckets = {
        f'kwsniff_client_request_latency_seconds_bucket{{api="{api}",client_id="{client}",le="{le}"}}': float(
            sum(1 for c, a, s in latencies if (c, a) == (client, api) and s <= le)
        )
        for client, api, _s in latencies
        for le in LATENCY_BUCKETS_S
    }
    assert {k: values[k] for k in buckets} == buckets
    # Records and bytes per client and topic: Produce requests' and Fetch responses' partitions.
    for api, names in (("Produce", "produced"), ("Fetch", "fetched")):
        for unit, column in (("records", "record_count"), ("bytes", "record_bytes")):
            want: Counter[tuple[str, str]] = Counter()
            for p in partitions:
                if p["api_name"] == api and p["record_bytes"]:
                    want[(p["client_id"], p["topic"])] += p[column]
            name = f"kwsniff_client_{names}_{unit}_total"
            assert want and series(values, name) == {
                f'{name}{{client_id="{client}",topic="{topic}"}}': float(n)
                for (client, topic), n in want.items()
            }
    # The report's failures, per client, API and error; its expected rows are not client errors.
    kinds: Counter[tuple[str, str, str, str]] = Counter()
    for row in json.loads(report.output)["errors"]:
        kinds[(row["kind"], row["client_id"], row["api_name"], row["error_name"])] += row["errors"]
    assert {kind for kind, *_ in kinds} == {"expected", "failure"}
    assert series(values, "kwsniff_client_errors_total") == {
        f'kwsniff_client_errors_total{{api="{api}",client_id="{client}",error="{error}"}}': float(n)
        for (kind, client, api, error), n in kinds.items()
        if kind == "failure"
    }
    assert values['kwsniff_errors_total{error="MEMBER_ID_REQUIRED"}'] == 2.0  # every errors row
    assert values["kwsniff_metrics_series_dropped_total"] == 0.0


def scrape_registry(metrics: Metrics) -> str:
    from prometheus_client import generate_latest

    return generate_latest(metrics.registry).decode()


def test_a_request_whose_header_has_no_client_id_is_labelled_empty() -> None:
    flow = Flow().handshake()
    flow.send(0, request(3, 0, 1, METADATA_V0_REQUEST, client_id=None))
    flow.send(1, response(1, METADATA_V0_RESPONSE))
    flow.send(0, request(3, 0, 2, METADATA_V0_REQUEST, client_id="named"))
    flow.send(1, response(2, METADATA_V0_RESPONSE))
    flow.close()
    stats = LiveStats(collect_pending=True)
    tables = ListSink()
    session = Session("null-client.pcap", StatsSink(tables, stats), SessionOptions())
    for ts, data in flow.packets:
        session.packet(ts, LINKTYPE_RAW_IPV4, data)
    session.finish()
    assert [r["client_id"] for r in tables.tables["requests"]] == [None, "named"]
    metrics = Metrics()
    metrics.update(CaptureCounters(), stats.take_pending(), 0)
    assert series(scraped(scrape_registry(metrics)), "kwsniff_client_requests_total") == {
        'kwsniff_client_requests_total{api="Metadata",client_id=""}': 1.0,
        'kwsniff_client_requests_total{api="Metadata",client_id="named"}': 1.0,
    }


def test_client_series_take_at_most_half_of_the_series_cap() -> None:
    # 20 clients' Produce requests against a cap of 10: the first 5 clients' series are made; the
    # topics of client c00 then find the clients' half full, and the topics' own series fill the cap.
    metrics = Metrics(max_series=10)
    requests = [("Produce", None, 0.001, f"c{i:02d}") for i in range(20)]
    topics = [(f"t{i}", "Produce", 3, 300, "c00") for i in range(5)]
    lag = [(("g", "t0", 0), 1, 0.5, None)]
    metrics.update(CaptureCounters(), Pending(requests, [], topics, lag, [], [], [], [], []), 0)
    values = scraped(scrape_registry(metrics))
    assert series(values, "kwsniff_client_requests_total") == {
        f'kwsniff_client_requests_total{{api="Produce",client_id="c{i:02d}"}}': 1.0 for i in range(5)
    }
    assert series(values, "kwsniff_client_produced_records_total") == {}
    assert series(values, "kwsniff_produced_records_total") == {
        f'kwsniff_produced_records_total{{topic="t{i}"}}': 3.0 for i in range(5)
    }
    assert series(values, "kwsniff_consumer_group_lag_records") == {}
    assert values['kwsniff_requests_total{api="Produce"}'] == 20.0  # an API Kafka defines: uncapped
    # 15 clients' requests, 5 client-topic series, the lag (the cap is full): 21 updates not made.
    assert values["kwsniff_metrics_series_dropped_total"] == 21.0


def test_apis_and_errors_named_by_a_number_take_at_most_an_eighth_of_the_series_cap_each() -> None:
    # 3,000 requests of APIs no Kafka defines and 3,000 error codes no Kafka defines, in the same
    # update as 5 topics' Produce (an update takes requests, then errors, then topics): the numbered
    # names take 2 + 2 of a cap of 20 and the topics still get their series. Before, a flood of them
    # (a capture's batch under load) took the whole cap first and no topic had a series.
    metrics = Metrics(max_series=20)
    requests = [(f"Unknown({1_000 + i})", None, 0.001, None) for i in range(3_000)]
    errors = [(f"UNKNOWN_ERROR_CODE({1_000 + i})", "ApiVersions", None, False) for i in range(3_000)]
    topics = [(f"t{i}", "Produce", 3, 300, None) for i in range(5)]
    metrics.update(CaptureCounters(), Pending(requests, errors, topics, [], [], [], [], [], []), 0)
    values = scraped(scrape_registry(metrics))
    unknown_apis = [k for k in values if k.startswith('kwsniff_requests_total{api="Unknown(')]
    unknown_errors = [k for k in values if k.startswith('kwsniff_errors_total{error="UNKNOWN_ERROR_CODE(')]
    assert (len(unknown_apis), len(unknown_errors)) == (2, 2)  # an eighth of the cap each
    assert series(values, "kwsniff_produced_records_total") == {
        f'kwsniff_produced_records_total{{topic="t{i}"}}': 3.0 for i in range(5)
    }


def test_the_endpoint_serves_the_self_metrics_and_no_created_series(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    metrics = Metrics()
    metrics.serve(port, "127.0.0.1")
    try:
        output = Output(tmp_path / "out")
        output.on_commit = metrics.committed
        before = time.time()
        output.commit(again=True)
        after = time.time()
        output.close()
        error = ("NOT_LEADER_OR_FOLLOWER", "Produce", "p", False)
        pending = Pending(
            [("Produce", None, 0.002, "p")], [error], [("t", "Produce", 2, 90, "p")], [], [], [], [], [], []
        )
        metrics.update(CaptureCounters(10, 1000, 3, 1, 2, 7), pending, 1)
        metrics.increment_worker_restarts()
        text = scrape(port)
    finally:
        metrics.close()
    names = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if not line.startswith("#")}
    assert [n for n in names if n.endswith("_created")] == []
    values = scraped(text)
    assert before <= values["kwsniff_last_commit_timestamp_seconds"] <= after
    assert values["kwsniff_commit_duration_seconds_count"] == 1.0
    assert {
        k: v
        for k, v in values.items()
        if k.startswith(("kwsniff_packets_dropped", "kwsniff_queue", "kwsniff_worker_restarts"))
    } == {
        'kwsniff_packets_dropped_total{cause="kernel"}': 3.0,
        'kwsniff_packets_dropped_total{cause="interface"}': 1.0,
        'kwsniff_packets_dropped_total{cause="queue"}': 2.0,
        "kwsniff_queue_depth": 7.0,
        "kwsniff_worker_restarts_total": 1.0,
    }
    for line in (
        'kwsniff_client_requests_total{api="Produce",client_id="p"}',
        'kwsniff_client_errors_total{api="Produce",client_id="p",error="NOT_LEADER_OR_FOLLOWER"}',
        'kwsniff_client_request_latency_seconds_count{api="Produce",client_id="p"}',
        'kwsniff_client_produced_records_total{client_id="p",topic="t"}',
    ):
        assert values[line] >= 1.0, line
    assert values['kwsniff_client_produced_bytes_total{client_id="p",topic="t"}'] == 90.0
    # The names the alert rules read, counters with exactly one `_total`.
    types = {
        tuple(line.split()[2:]) for line in text.splitlines() if line.startswith("# TYPE kwsniff_client")
    }
    assert types == {
        ("kwsniff_client_removed_version_requests_total", "counter"),
        ("kwsniff_client_requests_total", "counter"),
        ("kwsniff_client_errors_total", "counter"),
        ("kwsniff_client_request_latency_seconds", "histogram"),
        ("kwsniff_client_produced_records_total", "counter"),
        ("kwsniff_client_produced_bytes_total", "counter"),
        ("kwsniff_client_fetched_records_total", "counter"),
        ("kwsniff_client_fetched_bytes_total", "counter"),
    }


@pytest.mark.parametrize("workers", [1, 2])
def test_a_running_capture_serves_its_commits_drops_and_queue(tmp_path: Path, workers: int) -> None:
    """`capture --rotate-seconds 1 --metrics-port`: each period's commit moves the last commit time
    and counts its duration, in one process and with workers (the coordinator commits)."""
    broker_port, metrics_port = free_ports(2)
    err_path = tmp_path / "err"
    started = time.time()
    command = [sys.executable, "-m", "kwsniff", "capture", "lo", "-p", str(broker_port)]
    command += ["--rotate-seconds", "1", "--workers", str(workers), "--out", str(tmp_path / "out")]
    command += ["--metrics-port", str(metrics_port)]
    out_path = tmp_path / "summary"
    with err_path.open("wb") as err, out_path.open("wb") as out:
        capture = subprocess.Popen(command, stdout=out, stderr=err)
    try:
        page: dict[str, str] = {}

        def commits() -> float:
            assert capture.poll() is None, err_path.read_text(errors="replace")
            try:
                page["text"] = scrape(metrics_port)
            except OSError:
                return 0.0
            return scraped(page["text"]).get("kwsniff_commit_duration_seconds_count", 0.0)

        wait_until(lambda: commits() >= 2.0, "two commits on the endpoint", CAPTURE_READY_TIMEOUT_S)
        scraped_at = time.time()
        values = scraped(page["text"])
        assert started < values["kwsniff_last_commit_timestamp_seconds"] <= scraped_at
        # The drops per cause: lo carries other tests' traffic the filter takes (tunnel ports,
        # fragments), and a loaded machine's kernel may drop some of it; what the endpoint said is
        # at most what the capture's summary reports at the end.
        dropped = {
            k: v
            for k, v in values.items()
            if k.startswith(("kwsniff_packets_dropped", "kwsniff_worker_restarts"))
        }
        assert sorted(dropped) == [
            'kwsniff_packets_dropped_total{cause="interface"}',
            'kwsniff_packets_dropped_total{cause="kernel"}',
            'kwsniff_packets_dropped_total{cause="queue"}',
            "kwsniff_worker_restarts_total",
        ]
        assert dropped["kwsniff_worker_restarts_total"] == 0.0
        assert "kwsniff_queue_depth" in values
        assert not [
            line
            for line in page["text"].splitlines()
            if line.split("{")[0].split(" ")[0].endswith("_created")
        ]
    finally:
        capture.send_signal(signal.SIGINT)
        try:
            capture.wait(timeout=CAPTURE_STOP_TIMEOUT_S)
        finally:
            stop_process(capture, signal.SIGKILL)
    assert capture.returncode == 0, err_path.read_text(errors="replace")
    summary = out_path.read_text()
    for cause, words in (
        ("kernel", "by the kernel"),
        ("interface", "by the interface"),
        ("queue", "by kwsniff's queues?"),
    ):
        final = re.search(rf"{words} (\d[\d,]*)", summary)
        assert final is not None, summary
        assert dropped[f'kwsniff_packets_dropped_total{{cause="{cause}"}}'] <= int(
            final.group(1).replace(",", "")
        )
