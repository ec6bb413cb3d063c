"""A capture attached to a running broker (issue 48, goal 6): real clients (confluent-kafka, whose
consumer fetches by topic id, Fetch v13+) have been producing and consuming for half a minute when
`kwsniff capture --workers 2` starts. Their connections' Metadata and ApiVersions happened before it:
the capture learns the topic's name and the broker's node id only from the consumer's next Metadata
(a refresh every 2 s here). What it wrote before then is named once they are learned, and the report
counts the consumer's fetched records under the topic's name, never 0 under a missing one."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds

from tests.realparts import (
    CAPTURE_STOP_TIMEOUT_S,
    create_topics,
    run_kwsniff,
    start_broker,
    start_capture_on,
    stop_process,
    wait_until,
)

TOPIC, GROUP, CONSUMER = "attach-late", "attach-late-group", "attach-late-consumer"
BEFORE = 300  # records the consumer has read when the capture starts (about 30 s at 10 a second)
TIMEOUT_S = 180.0
CLIENTS = """
import sys, threading, time
from confluent_kafka import Consumer, Producer
bootstrap, topic, group, client = sys.argv[1:]
stop = threading.Event()
def produce():
    p = Producer({"bootstrap.servers": bootstrap, "client.id": "attach-late-producer", "linger.ms": 0})
    n = 0
    while not stop.wait(0.1):
        p.produce(topic, value=b"late %d" % n, partition=n % 2)
        p.poll(0)
        n += 1
    p.flush(10)
threading.Thread(target=produce, daemon=True).start()
c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": client,
              "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 2000})
c.subscribe([topic])
read = 0
def quit_on_stdin():
    sys.stdin.read()
    stop.set()
threading.Thread(target=quit_on_stdin, daemon=True).start()
while not stop.is_set():
    msg = c.poll(0.2)
    if msg is not None and msg.error() is None:
        read += 1
        if read % 50 == 0:
            print("read", read, flush=True)
c.close()
"""


def partition_rows(out: Path, api_key: int) -> list[dict[str, Any]]:
    table = ds.dataset(out / "partitions").to_table(
        columns=["api_key", "client_id", "group_id", "topic", "topic_id", "record_count"]
    )
    return [r for r in table.to_pylist() if r["api_key"] == api_key and r["client_id"] == CONSUMER]


def test_a_capture_attached_half_a_minute_late_names_what_it_saw_before_learning_the_names(
    tmp_path: Path,
) -> None:
    out, err = tmp_path / "live", tmp_path / "capture.err"
    with start_broker() as broker:
        create_topics(broker.bootstrap, {TOPIC: 2})
        clients = subprocess.Popen(
            [sys.executable, "-c", CLIENTS, broker.bootstrap, TOPIC, GROUP, CONSUMER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        capture = None
        try:
            assert clients.stdout is not None
            for line in clients.stdout:  # bounded: the clients read ever more, or end
                if int(line.split()[1]) >= BEFORE:
                    break
            else:
                raise AssertionError("the clients ended before reading enough")
            args = ["--out", str(out), "-p", str(broker.port), "--workers", "2", "--rotate-seconds", "2"]
            capture = start_capture_on("lo", args, err)

            def named_and_committed() -> bool:
                assert capture is not None and capture.poll() is None, err.read_text()
                try:
                    named = any(r["topic"] == TOPIC for r in partition_rows(out, 1))
                    return named and any(r["group_id"] == GROUP for r in partition_rows(out, 8))
                except (FileNotFoundError, OSError, ValueError):  # nothing committed yet
                    return False

            # The consumer's Metadata refresh names the topic (its Fetch rows committed with it),
            # and its group commits (auto-commit, every 5 s) in the capture.
            wait_until(named_and_committed, "the consumer's fetches named and a commit", TIMEOUT_S)
        finally:
            if capture is not None:
                capture.send_signal(signal.SIGINT)
                capture.communicate(timeout=CAPTURE_STOP_TIMEOUT_S)
            if clients.poll() is None:
                clients.communicate("", timeout=30)
            stop_process(clients)  # type: ignore[arg-type]
    assert capture.returncode == 0, err.read_text()
    rows = partition_rows(out, 1)
    # Every Fetch partition row of the consumer (by topic id: no Fetch by name) has the name, those
    # decoded before the capture learned it included: they were held until it came.
    assert rows and all(r["topic_id"] is not None for r in rows)
    assert {r["topic"] for r in rows} == {TOPIC}
    fetched = sum(r["record_count"] or 0 for r in rows)
    assert fetched > 0
    # The report counts them under the topic: the consumer's inventory row and its member lag.
    report = run_kwsniff(
        "report", str(out), "--section", "inventory", "--section", "member_lag", "--format", "json"
    )
    assert report.returncode == 0, report.stderr
    answer = json.loads(report.stdout)
    mine = [r for r in answer["inventory"] if r["client_id"] == CONSUMER and r["role"] == "consumer"]
    assert [(r["topic"], r["group_id"], r["records"]) for r in mine] == [(TOPIC, GROUP, fetched)]
    lags = [r for r in answer["member_lag"] if r["client_id"] == CONSUMER]
    assert lags and {r["topic"] for r in lags} == {TOPIC}
    # The broker's node id, learned from the same Metadata, names every request row of the consumer.
    requests = ds.dataset(out / "requests").to_table(columns=["client_id", "broker_id"]).to_pylist()
    ids = {r["broker_id"] for r in requests if r["client_id"] == CONSUMER}
    assert len(ids) == 1 and None not in ids
