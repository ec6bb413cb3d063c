"""Classic consumer groups on the wire: two confluent-kafka consumers against tansu join, sync,
rebalance when the second joins and when it leaves. The decoded `groups` rows are held against what
the clients report through their assignment callbacks and their configuration."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from realparts import create_topics, free_port, start_broker, tcpdump_capture

from kwsniff.pipeline.run import run_capture
from kwsniff.pipeline.session import SessionOptions
from kwsniff.rows import ListSink

TOPIC, PARTITIONS, GROUP = "payments", 4, "classic-group"
SESSION_TIMEOUT_MS, MAX_POLL_MS = 6000, 20000
DEADLINE_S = 40.0


@dataclass
class Member:
    """One consumer and the assignments its on_assign callback reported, in order."""

    name: str
    consumer: Any = None
    owned: set[int] = field(default_factory=set)
    assigned: list[str] = field(default_factory=list)

    def on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        self.owned = {p.partition for p in partitions}
        self.assigned.append(f"{TOPIC}:{','.join(str(p) for p in sorted(self.owned))}")

    def on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        self.owned = set()


def _join(bootstrap: str, member: Member) -> None:
    from confluent_kafka import Consumer

    member.consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": GROUP,
            "client.id": member.name,
            "session.timeout.ms": SESSION_TIMEOUT_MS,
            "max.poll.interval.ms": MAX_POLL_MS,
            "heartbeat.interval.ms": 500,
            "partition.assignment.strategy": "range",
        }
    )
    member.consumer.subscribe([TOPIC], on_assign=member.on_assign, on_revoke=member.on_revoke)


def _poll_until(members: list[Member], done: Any) -> None:
    deadline = time.monotonic() + DEADLINE_S
    for _ in range(2000):
        for m in members:
            m.consumer.poll(0.05)
        if done():
            return
        if time.monotonic() > deadline:
            break
    raise TimeoutError(f"group did not settle: {[(m.name, sorted(m.owned)) for m in members]}")


@dataclass
class Run:
    rows: list[dict[str, Any]]
    members: dict[str, Member]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    tmp = tmp_path_factory.mktemp("classic")
    pcap = Path(tmp / "classic.pcap")
    a, b = Member("classic-a"), Member("classic-b")
    with start_broker(free_port(), log_dir=str(tmp)) as broker, tcpdump_capture(pcap, broker.port):
        create_topics(broker.bootstrap, {TOPIC: PARTITIONS})
        _join(broker.bootstrap, a)
        _poll_until([a], lambda: a.owned == {0, 1, 2, 3})
        _join(broker.bootstrap, b)
        _poll_until([a, b], lambda: len(a.assigned) == 2 and len(b.assigned) == 1 and a.owned and b.owned)
        b.consumer.close()  # LeaveGroup
        _poll_until([a], lambda: len(a.assigned) == 3 and a.owned == {0, 1, 2, 3})
        a.consumer.close()
    sink = ListSink()
    run_capture(pcap, sink, SessionOptions())
    yield Run([r for r in sink.tables["groups"] if r["group_id"] == GROUP], {"classic-a": a, "classic-b": b})


def _member_rows(run: Run, name: str) -> list[dict[str, Any]]:
    member_id = next(
        r["member_id"]
        for r in run.rows
        if r["api_name"] == "JoinGroup" and r["error_name"] == "NONE" and r["member_id"].startswith(name)
    )
    return [r for r in run.rows if r["member_id"] == member_id]


def test_each_members_sync_assignments_are_its_on_assign_callbacks(run: Run) -> None:
    for name, member in run.members.items():
        syncs = [
            r["assignment"] for r in _member_rows(run, name) if r["event"] == "sync" and r["error_code"] == 0
        ]
        assert syncs == member.assigned


def test_generations_rise_with_each_rebalance_and_the_second_member_leaves(run: Run) -> None:
    a = _member_rows(run, "classic-a")
    b = _member_rows(run, "classic-b")
    joined = [
        (r["event"], r["generation_id"]) for r in a if r["event"] in ("join", "sync") and r["error_code"] == 0
    ]
    generations = [g for _, g in joined]
    # Three generations for A: alone, with B, alone again; each join answered before its sync.
    assert [e for e, _ in joined] == ["join", "sync"] * 3
    assert generations == sorted(generations) and len(set(generations)) == 3
    assert [r["event"] for r in b][-1] == "leave"
    assert [r["event"] for r in a][-1] == "leave"
    assert {r["protocol"] for r in run.rows} == {"classic"}


def test_join_requests_carry_the_clients_configuration_and_subscription(run: Run) -> None:
    joins = [r for r in run.rows if r["event"] == "join"]
    assert {(r["session_timeout_ms"], r["rebalance_timeout_ms"], r["subscribed_topics"]) for r in joins} == {
        (SESSION_TIMEOUT_MS, MAX_POLL_MS, TOPIC)
    }
    # Heartbeats and syncs carry no epochs of the new protocols.
    assert {r["member_epoch"] for r in run.rows} == {None}
