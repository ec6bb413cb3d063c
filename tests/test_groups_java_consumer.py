"""KIP-848 consumer groups from the Kafka Java client: kafka-clients 3.9.1 (group.protocol=consumer,
ConsumerGroupHeartbeat v0, where the coordinator names the member) against the kio-encoded test
coordinator (tests/group_coordinator.py), with a librdkafka member joining and leaving beside it.

The Java member reports, from its ConsumerRebalanceListener, the partitions it owns and its member
epoch (`groupMetadata().generationId()` is the member epoch under the consumer protocol): the decoded
`groups` rows must show exactly those assignments, each reconciled between the response that carried
it and the first heartbeat that owns it, at the epochs the callbacks saw (or, when the client had
already heard of the next assignment by the time its callback ran, just before it).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from group_clients import CONSUMER_PROTOCOL, Member, coordinated_broker, describe, poll_until
from realparts import create_topics, stop_process, tcpdump_capture

from kwsniff.pipeline.run import run_capture
from kwsniff.pipeline.session import SessionOptions
from kwsniff.rows import ListSink

TESTS = Path(__file__).resolve().parent
TOPIC, PARTITIONS, GROUP = "orders", 4, "kip848-group"
SHARE_GROUP, SHARE_SECONDS = "kip932-group", 1
DEADLINE_S = 60.0


def _classpath() -> str:
    spec = importlib.util.find_spec("pyflink")
    assert spec is not None and spec.submodule_search_locations, (
        "pip install shigawire-apache-flink-libraries"
    )
    lib = Path(next(iter(spec.submodule_search_locations))) / "lib"
    return ":".join(str(lib / f"{name}.jar") for name in ("kafka-clients", "slf4j-api"))


@dataclass
class Run:
    rows: list[dict[str, Any]]
    sent: list[dict[str, Any]]
    reports: list[dict[str, Any]]  # the Java member's callbacks


def _wait(done: Any, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.05)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    tmp = tmp_path_factory.mktemp("java848")
    pcap = tmp / "java848.pcap"
    reports: list[dict[str, Any]] = []
    with coordinated_broker(tmp, TOPIC, PARTITIONS) as broker:
        bootstrap = broker.bootstrap
        java = None
        try:
            with tcpdump_capture(pcap, broker.port):
                create_topics(bootstrap, {TOPIC: PARTITIONS})
                describe(bootstrap, TOPIC)
                java = subprocess.Popen(
                    [
                        "java",
                        "-cp",
                        _classpath(),
                        str(TESTS / "java" / "Kip848Consumer.java"),
                        bootstrap,
                        GROUP,
                    ]
                    + [TOPIC, str(PARTITIONS), "2"],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    text=True,
                )
                assert java.stdout is not None
                stdout = java.stdout
                reader = threading.Thread(
                    target=lambda: reports.extend(
                        json.loads(line) for line in stdout if line.startswith("{")
                    ),
                    daemon=True,
                )
                reader.start()
                _wait(
                    lambda: any(r["owned"] == [0, 1, 2, 3] for r in reports), "the Java member owned nothing"
                )
                b = Member("consumer-b", TOPIC)
                b.subscribe(bootstrap, GROUP, CONSUMER_PROTOCOL)
                poll_until([b], lambda: b.owned == {2, 3} and reports[-1]["owned"] == [0, 1], DEADLINE_S)
                b.consumer.close()
                java.wait(timeout=DEADLINE_S)
                reader.join(timeout=10)
                # The same jar's early-access share consumer joins a share group, then leaves.
                share = subprocess.run(
                    ["java", "-cp", _classpath(), str(TESTS / "java" / "Kip932ShareConsumer.java"), bootstrap]
                    + [SHARE_GROUP, TOPIC, str(SHARE_SECONDS)],
                    capture_output=True,
                    text=True,
                    timeout=DEADLINE_S,
                )
                assert '{"closed":true}' in share.stdout, share.stderr[-2000:]
        finally:
            if java is not None:
                stop_process(java)  # type: ignore[arg-type]
    sink = ListSink()
    run_capture(pcap, sink, SessionOptions())
    rows = [r for r in sink.tables["groups"] if r["api_key"] in (68, 76)]
    yield Run(rows, [json.loads(line) for line in broker.log.read_text().splitlines()], reports)


def test_heartbeats_decode_to_what_the_coordinator_sent(run: Run) -> None:
    """Consumer (68) and share (76) heartbeats, in order, against the kio coordinator's log."""
    assert [
        (r["api_key"], r["member_id"], r["member_epoch"], r["member_epoch_response"], r["error_code"])
        for r in run.rows
    ] == [(s["api_key"], s["member_id"], s["epoch_sent"], s["epoch"], s["error_code"]) for s in run.sent]
    decoded = [(r["api_version"], r["member_id"]) for r in run.rows if r["api_key"] == 68]
    java = run.reports[0]["member"]
    # Java 3.9.1 speaks ConsumerGroupHeartbeat v0, librdkafka 2.16 v1.
    assert {v for v, m in decoded if m == java} == {0}
    assert {v for v, m in decoded if m != java} == {1}


def test_the_java_members_epochs_and_assignments_are_its_callbacks(run: Run) -> None:
    java = run.reports[0]["member"]
    rows = [r for r in run.rows if r["member_id"] == java]
    assigned = [r for r in rows if r["assignment"] is not None]
    assert [
        (r["event"], r["member_epoch"], r["member_epoch_response"], r["assignment"]) for r in assigned
    ] == [
        ("join", 0, 1, f"{TOPIC}:0,1,2,3"),
        ("assignment", 1, 2, f"{TOPIC}:0,1"),
        ("assignment", 2, 3, f"{TOPIC}:0,1,2,3"),
    ]
    # What the client reported once each change settled: the partitions it owns, in order, and its
    # member epoch. The callback runs in poll() while the client's background thread goes on
    # heartbeating, so under load the epoch it reads may already be the next assignment's (seen in
    # CI: epoch 3 reported with epoch 2's partitions), never an older one.
    settled = [r for r in run.reports if r["kind"] == "assigned" and r["owned"]]
    assert [f"{TOPIC}:{','.join(map(str, r['owned']))}" for r in settled] == [
        r["assignment"] for r in assigned
    ]
    epochs = [r["member_epoch_response"] for r in assigned]
    for k, report in enumerate(settled):
        assert epochs[k] <= report["epoch"] <= (epochs[k + 1] if k + 1 < len(epochs) else epochs[k])
    for row, report in zip(assigned, settled, strict=True):
        owning = next(
            r
            for r in rows
            if r["ts_request"] > row["ts_response"] and r["owned_partitions"] == row["assignment"]
        )
        # The callback (ms clock) ran between the assignment's arrival and the first heartbeat owning it.
        assert row["ts_response"] // 1000 * 1000 <= report["us"] <= owning["ts_request"]
    assert [r["event"] for r in rows][-1] == "leave"


def test_the_java_share_member_joins_is_given_every_partition_and_leaves(run: Run) -> None:
    """KIP-932 early access (kafka-clients 3.9.1, ShareGroupHeartbeat v0): a share group's members
    share every partition; the coordinator names the member in its first answer."""
    rows = [r for r in run.rows if r["api_key"] == 76]
    sent = [s for s in run.sent if s["api_key"] == 76]
    assert len(rows) == len(sent) > 2
    assert {(r["protocol"], r["api_version"], r["group_id"], r["heartbeat_interval_ms"]) for r in rows} == {
        ("share", 0, SHARE_GROUP, 300)
    }
    first, last = rows[0], rows[-1]
    assert (first["event"], first["member_epoch"], first["member_epoch_response"], first["member_id"]) == (
        "join",
        0,
        1,
        sent[0]["member_id"],
    )
    assert (first["assignment"], first["subscribed_topics"]) == (f"{TOPIC}:0,1,2,3", TOPIC)
    assert (last["event"], last["member_epoch"], last["member_epoch_response"]) == ("leave", -1, -1)
    assert {r["event"] for r in rows[1:-1]} == {"heartbeat"}
