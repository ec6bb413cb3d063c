"""The shipped alert rules and dashboard against real parts (issue 48 goal 4): a real Prometheus
(Debian's `prometheus`) with deploy/prometheus/kwsniff-alerts.yml loaded scrapes a real two-worker
`kwsniff capture` of real clients against a real tansu broker. A consumer group's one consumer commits
and is killed (SIGKILL) while the producer goes on: KafkaConsumerGroupStopped fires and a real
Alertmanager (Debian's `prometheus-alertmanager`) posts it to a webhook receiver in this test. A
client pinned to Kafka 0.10.1 (kafka-python) sends Produce v2, which Kafka 4.0 refuses:
KafkaClientOldApiVersion fires in Prometheus. Then every panel query of deploy/grafana/kwsniff.json,
run on that Prometheus' HTTP API, returns series (those on metrics still pending, test_alert_rules'
PENDING_METRICS, once the capture serves them)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from contextlib import closing
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from test_alert_rules import METRIC_NAME, PENDING_METRICS, RULES, dashboard_queries, known
from test_metrics_prometheus import query, urllib_ok, value_of

from tests.realparts import (
    CAPTURE_READY_TIMEOUT_S,
    CAPTURE_STOP_TIMEOUT_S,
    create_topics,
    free_ports,
    start_broker,
    stop_process,
    wait_until,
)

TOPIC = "alerts-orders"
GROUP = "alerts-billing"
LEGACY_CLIENT = "legacy-0.10.1-producer"
FIRST = 20  # records produced before the consumer commits
STATUS_SECONDS = 5  # `capture --group-status-seconds`: STOP 5 s after the last commit, not 60 s
JOIN_TIMEOUT_S = 120.0  # tansu answers a new group's first JoinGroup after about 25 s
# From the kill: STOP judged within STATUS_SECONDS + 5 s of packet time, the rule's `for: 1m`, the
# evaluation and Alertmanager's group_wait (1 s here).
ALERT_TIMEOUT_S = 180.0
READY_TIMEOUT_S = 60.0

CONSUMER = """
import sys
from confluent_kafka import Consumer

bootstrap, group, topic, want = sys.argv[1:]
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": "alerts-consumer",
                     "enable.auto.commit": False, "auto.offset.reset": "earliest"})
consumer.subscribe([topic])
read = 0
while read < int(want):
    msg = consumer.poll(1.0)
    if msg is not None and msg.error() is None:
        read += 1
print("committed", consumer.commit(asynchronous=False)[0].offset, flush=True)
sys.stdin.read()  # alive, committing nothing, until killed
"""


class Webhook:
    """Alertmanager's webhook receiver: an HTTP server on a free loopback port keeping each POST."""

    def __init__(self) -> None:
        self.posts: list[dict[str, Any]] = []
        posts = self.posts

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                posts.append(json.loads(body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def alerts(self, name: str) -> list[dict[str, Any]]:
        return [a for post in list(self.posts) for a in post["alerts"] if a["labels"]["alertname"] == name]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def start_server(command: list[str], log: Path, ready_url: str, what: str) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)

    def ready() -> bool:
        assert proc.poll() is None, log.read_text(errors="replace")
        return urllib_ok(ready_url)

    try:
        wait_until(ready, what, READY_TIMEOUT_S)
    except BaseException:
        stop_process(proc)
        raise
    return proc


def start_alertmanager(work: Path, port: int, webhook: str) -> subprocess.Popen[bytes]:
    config = work / "alertmanager.yml"
    config.write_text(
        "route:\n  receiver: webhook\n  group_by: [alertname, group]\n"
        "  group_wait: 1s\n  group_interval: 1s\n  repeat_interval: 1h\n"
        f"receivers:\n  - name: webhook\n    webhook_configs:\n      - url: '{webhook}'\n"
    )
    command = [
        "prometheus-alertmanager",
        f"--config.file={config}",
        f"--storage.path={work / 'alertmanager'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",  # one instance: no gossip port
    ]
    url = f"http://127.0.0.1:{port}/-/ready"
    return start_server(command, work / "alertmanager.log", url, "alertmanager ready")


def start_prometheus(
    work: Path, port: int, metrics_port: int, alertmanager_port: int
) -> subprocess.Popen[bytes]:
    config = work / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"rule_files:\n  - '{RULES}'\n"
        "alerting:\n  alertmanagers:\n    - static_configs:\n"
        f"        - targets: ['127.0.0.1:{alertmanager_port}']\n"
        "scrape_configs:\n  - job_name: kwsniff\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{metrics_port}']\n"
    )
    command = [
        "prometheus",
        f"--config.file={config}",
        f"--storage.tsdb.path={work / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    return start_server(
        command, work / "prometheus.log", f"http://127.0.0.1:{port}/-/ready", "prometheus ready"
    )


def legacy_produce(bootstrap: str) -> None:
    """kafka-python pinned to 0.10.1 sends Produce v2 (message format v1); tansu refuses the format
    as a Kafka 4 broker would, and drops the connection: the request was sent, which is what counts."""
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=bootstrap, api_version=(0, 10, 1), client_id=LEGACY_CLIENT, retries=0, linger_ms=0
    )
    try:
        producer.send(TOPIC, value=b"legacy", partition=0).get(timeout=10)
    except Exception:  # refused: noted by the capture, not by this test
        pass
    finally:
        producer.close(timeout=5)


class Producing:
    """A producer (confluent-kafka) sending a record every 0.2 s from a thread until stopped."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import Producer

        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "client.id": "alerts-producer", "acks": "all"}
        )
        self.stop = threading.Event()
        self.acked = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def send(self, count: int) -> int:
        for i in range(count):
            self.producer.produce(TOPIC, value=b"order %d" % i, partition=0, on_delivery=self._delivered)
        assert self.producer.flush(30) == 0
        return self.acked

    def _delivered(self, err: Any, _msg: Any) -> None:
        self.acked += err is None

    def _run(self) -> None:
        while not self.stop.wait(0.2):
            self.producer.produce(TOPIC, value=b"later", partition=0, on_delivery=self._delivered)
            self.producer.poll(0)

    def close(self) -> None:
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join(timeout=10)
        self.producer.flush(10)
        # The client's own threads stop here, not when it is collected: none keeps calling a
        # broker the test has stopped.
        self.producer.close()


def test_a_killed_consumer_fires_group_stopped_through_alertmanager_and_every_panel_has_series(
    tmp_path: Path,
) -> None:
    prometheus_port, alertmanager_port, metrics_port = free_ports(3)
    err_path = tmp_path / "capture.err"
    started: list[subprocess.Popen[bytes]] = []  # stopped by PID in reverse order
    capture = consumer = None
    producing = None
    with closing(Webhook()) as webhook, start_broker() as broker:
        create_topics(broker.bootstrap, {TOPIC: 1})
        try:
            command = [sys.executable, "-m", "kwsniff", "capture", "lo", "-p", str(broker.port), "-q"]
            command += ["--workers", "2", "--out", str(tmp_path / "out"), "--metrics-port", str(metrics_port)]
            command += ["--group-status-seconds", str(STATUS_SECONDS)]
            with err_path.open("wb") as err:
                capture = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err)
            wait_until(
                lambda: urllib_ok(f"http://127.0.0.1:{metrics_port}/metrics") or capture.poll() is not None,
                "the capture's metrics endpoint",
                timeout_s=CAPTURE_READY_TIMEOUT_S,
            )
            assert capture.poll() is None, err_path.read_text(errors="replace")
            started.append(start_alertmanager(tmp_path, alertmanager_port, webhook.url))
            started.append(start_prometheus(tmp_path, prometheus_port, metrics_port, alertmanager_port))
            wait_until(lambda: value_of(prometheus_port, 'up{job="kwsniff"}') == 1.0, "first scrape", 30)
            loaded = query(prometheus_port, "count by (alertname) (ALERTS)")  # nothing fires yet
            assert loaded == []

            producing = Producing(broker.bootstrap)
            assert producing.send(FIRST) == FIRST
            consumer = subprocess.Popen(
                [sys.executable, "-c", CONSUMER, broker.bootstrap, GROUP, TOPIC, str(FIRST)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
            lines: list[bytes] = []
            assert consumer.stdout is not None
            reader = threading.Thread(target=lambda: lines.append(consumer.stdout.readline()), daemon=True)
            reader.start()
            wait_until(lambda: lines or consumer.poll() is not None, "the consumer's commit", JOIN_TIMEOUT_S)
            assert lines == [b"committed %d\n" % FIRST]
            status = f'kwsniff_consumer_group_status{{group="{GROUP}",topic="{TOPIC}",state="%s"}}'
            # Caught up and committed: OK, and no alert, before the kill.
            wait_until(lambda: value_of(prometheus_port, status % "OK") == 1.0, "status OK", 60)
            assert webhook.alerts("KafkaConsumerGroupStopped") == []
            killed_at = time.time()
            stop_process(consumer, signal.SIGKILL)
            producing.thread.start()  # the group falls behind with no commit
            legacy_produce(broker.bootstrap)
            # TOPIC_ALREADY_EXISTS: an error code for the errors panel.
            try:
                create_topics(broker.bootstrap, {TOPIC: 1})
            except Exception as exc:
                assert "TOPIC_ALREADY_EXISTS" in str(exc)
            else:
                raise AssertionError("creating an existing topic succeeded")

            wait_until(lambda: value_of(prometheus_port, status % "STOP") == 1.0, "status STOP", 60)
            wait_until(
                lambda: webhook.alerts("KafkaConsumerGroupStopped"), "the webhook's POST", ALERT_TIMEOUT_S
            )
            (alert,) = webhook.alerts("KafkaConsumerGroupStopped")
            assert alert["status"] == "firing"
            assert {k: alert["labels"][k] for k in ("group", "topic", "state", "severity", "job")} == {
                "group": GROUP,
                "topic": TOPIC,
                "state": "STOP",
                "severity": "critical",
                "job": "kwsniff",
            }
            assert alert["annotations"]["summary"] == f"Consumer group {GROUP} stopped on topic {TOPIC}"
            # Its last commit, the consumer's, came before the kill.
            fired_at = time.time()
            last_commit = value_of(
                prometheus_port,
                f'kwsniff_consumer_group_last_commit_timestamp_seconds{{group="{GROUP}",topic="{TOPIC}"}}',
            )
            assert last_commit is not None and last_commit <= killed_at < fired_at
            old = (
                f'ALERTS{{alertname="KafkaClientOldApiVersion",alertstate="firing",client_id="{LEGACY_CLIENT}"'
                ',api="Produce",api_version="2",removed_in="4.0"}'
            )
            wait_until(lambda: value_of(prometheus_port, old) == 1.0, "KafkaClientOldApiVersion", 30)

            empty, pending = [], []
            for title, expr in dashboard_queries():
                if query(prometheus_port, expr):
                    continue
                names = set(METRIC_NAME.findall(expr))
                absent = [n for n in names if known(n, PENDING_METRICS) and not scraped(prometheus_port, n)]
                (pending if absent else empty).append((title, expr))
            assert empty == []
            print("panels on metrics pending:", sorted({title for title, _expr in pending}))
            assert capture.poll() is None
        finally:
            for proc in reversed(started):
                stop_process(proc)
            if consumer is not None:
                stop_process(consumer, signal.SIGKILL)
            if producing is not None:
                producing.close()
            if capture is not None:
                capture.send_signal(signal.SIGINT)
                try:
                    capture.wait(timeout=CAPTURE_STOP_TIMEOUT_S)
                finally:
                    stop_process(capture, signal.SIGKILL)
    assert capture is not None
    assert capture.returncode == 0, err_path.read_text(errors="replace")


def scraped(port: int, name: str) -> bool:
    """Whether Prometheus holds any series of ``name`` (a histogram by any of its series)."""
    base = name.removesuffix("_bucket")
    return bool(query(port, f'count({{__name__=~"{base}(_bucket|_count|_sum)?"}})'))
