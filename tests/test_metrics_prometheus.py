"""A real Prometheus server (Debian's `prometheus`) scrapes `kwsniff capture lo --workers 2
--metrics-port` while real confluent-kafka clients run against a real tansu broker: the consumer
group's lag in records, as PromQL reads it, equals what the clients did (records the producer's
delivery reports acknowledged after the group's last commit), the produced-records counter equals
the records acknowledged, per topic and per client id, the consumer's fetched records and its one
commit are its client id's, and no `_created` series is scraped. The oracle is the clients' own
record; kwsniff's tables are not read."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from tests.realparts import (
    CAPTURE_READY_TIMEOUT_S,
    CAPTURE_STOP_TIMEOUT_S,
    create_topics,
    free_ports,
    start_broker,
    stop_process,
    wait_until,
)

TOPIC = "metrics-lag"
GROUP = "metrics-group"
FIRST, LATER = 30, 7  # records produced before the group's commit, and after it
SCRAPE_TIMEOUT_S = 90.0  # for Prometheus to have scraped the figure the clients' actions make


def produce(bootstrap: str, count: int, start: int) -> int:
    """``count`` records to partition 0, acks=all; how many the delivery reports acknowledged."""
    from confluent_kafka import Producer

    acked = []
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": "metrics-producer", "acks": "all"})
    for i in range(start, start + count):
        producer.produce(TOPIC, value=b"record %d" % i, partition=0, on_delivery=lambda e, m: acked.append(e))
    assert producer.flush(30) == 0
    return sum(1 for err in acked if err is None)


def consume_and_commit(bootstrap: str, count: int) -> int:
    """A member of GROUP reads ``count`` records of partition 0 and commits where it stopped; the
    offset the broker confirmed committing."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": GROUP,
            "client.id": "metrics-consumer",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        read = 0
        deadline = time.monotonic() + 60
        while read < count and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                read += 1
        assert read == count
        committed = consumer.commit(asynchronous=False)
        assert committed is not None
        return committed[0].offset
    finally:
        consumer.close()


def start_prometheus(work: Path, port: int, metrics_port: int) -> subprocess.Popen[bytes]:
    config = work / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: kwsniff\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{metrics_port}']\n"
    )
    log = (work / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={config}",
            f"--storage.tsdb.path={work / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )

    def ready() -> bool:
        assert proc.poll() is None, (work / "prometheus.log").read_text(errors="replace")
        try:
            return urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=2).status == 200
        except OSError:
            return False

    wait_until(ready, "prometheus ready", timeout_s=60)
    return proc


def query(port: int, promql: str, at: float | None = None) -> list[dict[str, Any]]:
    """An instant query, evaluated at ``at`` (seconds since the epoch) when given."""
    params = {"query": promql} | ({} if at is None else {"time": f"{at:.3f}"})
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode(params)
    answer = json.loads(urllib.request.urlopen(url, timeout=5).read())
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def value_of(port: int, promql: str, at: float | None = None) -> float | None:
    result = query(port, promql, at)
    return float(result[0]["value"][1]) if len(result) == 1 else None


def test_prometheus_scrapes_the_groups_lag_and_the_produced_records(tmp_path: Path) -> None:
    prometheus_port, metrics_port = free_ports(2)
    err_path = tmp_path / "capture.err"
    with start_broker() as broker:
        create_topics(broker.bootstrap, {TOPIC: 1})
        command = [sys.executable, "-m", "kwsniff", "capture", "lo", "-p", str(broker.port), "-q"]
        command += ["--workers", "2", "--out", str(tmp_path / "out"), "--metrics-port", str(metrics_port)]
        with err_path.open("wb") as err:
            capture = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err)
        prometheus = None
        try:
            wait_until(
                lambda: urllib_ok(f"http://127.0.0.1:{metrics_port}/metrics") or capture.poll() is not None,
                "the capture's metrics endpoint",
                timeout_s=CAPTURE_READY_TIMEOUT_S,
            )
            assert capture.poll() is None, err_path.read_text(errors="replace")
            prometheus = start_prometheus(tmp_path, prometheus_port, metrics_port)
            # Prometheus scrapes the capture before the clients start: its first scrape is up.
            wait_until(lambda: value_of(prometheus_port, 'up{job="kwsniff"}') == 1.0, "first scrape", 30)

            acked = produce(broker.bootstrap, FIRST, 0)
            committed = consume_and_commit(broker.bootstrap, FIRST)
            produced_at = time.time()
            acked += produce(broker.bootstrap, LATER, FIRST)
            assert (acked, committed) == (FIRST + LATER, FIRST)

            lag = f'kwsniff_consumer_group_lag_records{{group="{GROUP}",topic="{TOPIC}",partition="0"}}'
            produced = f'kwsniff_produced_records_total{{topic="{TOPIC}"}}'
            # The high watermark the last acknowledgement says, less the group's committed offset.
            wait_until(lambda: value_of(prometheus_port, lag) == acked - committed, lag, SCRAPE_TIMEOUT_S)
            wait_until(lambda: value_of(prometheus_port, produced) == acked, produced, SCRAPE_TIMEOUT_S)
            # Per client id (the workers relay each row's client id to the coordinator). The one
            # consumer's fetched records are the topic's: a Fetch response carries whole batches,
            # so a batch the consumer had begun is counted again when fetched again.
            client_produced = (
                f'kwsniff_client_produced_records_total{{client_id="metrics-producer",topic="{TOPIC}"}}'
            )
            wait_until(
                lambda: value_of(prometheus_port, client_produced) == acked, client_produced, SCRAPE_TIMEOUT_S
            )
            fetched = f'kwsniff_fetched_records_total{{topic="{TOPIC}"}}'
            client_fetched = (
                f'kwsniff_client_fetched_records_total{{client_id="metrics-consumer",topic="{TOPIC}"}}'
            )

            def fetched_counts() -> tuple[float | None, float | None]:
                at = time.time()
                return value_of(prometheus_port, fetched, at), value_of(prometheus_port, client_fetched, at)

            wait_until(
                lambda: (n := fetched_counts())[0] == n[1] and (n[1] or 0) >= FIRST,
                client_fetched,
                SCRAPE_TIMEOUT_S,
            )
            commits = 'kwsniff_client_requests_total{client_id="metrics-consumer",api="OffsetCommit"}'
            wait_until(lambda: value_of(prometheus_port, commits) == 1.0, commits, SCRAPE_TIMEOUT_S)
            assert query(prometheus_port, '{__name__=~".+_created"}') == []
            # The committed offset was produced by the later records: their age at the latest event
            # the capture saw, at most what the test's clock says has passed since it produced them.
            seconds = value_of(prometheus_port, lag.replace("_records", "_seconds"))
            assert seconds is not None and 0 <= seconds <= time.time() - produced_at
            # Every Produce request went to the one broker: its label is the broker's ip:port. Both
            # counts are read at one evaluation time (one scrape): two queries could straddle the
            # scrape that brought the last Produce answer.
            by_broker_q = (
                f'kwsniff_broker_request_latency_seconds_count{{api="Produce",broker="{broker.bootstrap}"}}'
            )
            every_q = 'kwsniff_request_latency_seconds_count{api="Produce"}'

            def produce_counts() -> tuple[float | None, float | None]:
                at = time.time()
                return value_of(prometheus_port, by_broker_q, at), value_of(prometheus_port, every_q, at)

            wait_until(
                lambda: (
                    print(
                        produce_counts(),
                        query(prometheus_port, "kwsniff_broker_request_latency_seconds_count"),
                        flush=True,
                    )
                    or (n := produce_counts())[0] == n[1]
                    and (n[0] or 0) >= 2
                ),
                "produce counts",
                SCRAPE_TIMEOUT_S,
            )
            by_broker, every = produce_counts()
            assert by_broker is not None and by_broker == every and by_broker >= 2
            assert value_of(prometheus_port, "kwsniff_metrics_series_dropped_total") == 0.0
        finally:
            if prometheus is not None:
                stop_process(prometheus)
            capture.send_signal(signal.SIGINT)
            try:
                capture.wait(timeout=CAPTURE_STOP_TIMEOUT_S)
            finally:
                stop_process(capture, signal.SIGKILL)
    assert capture.returncode == 0, err_path.read_text(errors="replace")


def urllib_ok(url: str) -> bool:
    try:
        return urllib.request.urlopen(url, timeout=2).status == 200
    except OSError:
        return False
