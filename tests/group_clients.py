"""What the consumer-group tests share: confluent-kafka members that keep what their assignment
callbacks report, a bounded poll loop, and tansu behind the kio-encoded test coordinator
(tests/group_coordinator.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from realparts import LOOPBACK, free_ports, start_broker, stop_process, wait_for_listener

TESTS = Path(__file__).resolve().parent
# KIP-848's protocol, read from the start of the topic.
CONSUMER_PROTOCOL = {"group.protocol": "consumer", "auto.offset.reset": "earliest"}
POLL_ROUNDS = 2000  # a bound besides the deadline: each round polls each member for 50 ms at most


@dataclass
class Member:
    """One confluent-kafka consumer and what its callbacks reported. Both protocols are kept the same
    way: a classic (eager) rebalance revokes every partition before it assigns the new set, a KIP-848
    one revokes and assigns only the partitions that move."""

    name: str
    topic: str
    consumer: Any = None
    owned: set[int] = field(default_factory=set)
    assigned: list[str] = field(default_factory=list)  # what it owned after each on_assign
    changes: list[tuple[int, str]] = field(default_factory=list)  # (wall clock µs, owned after a callback)

    def on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        self.owned |= {p.partition for p in partitions}
        self.assigned.append(f"{self.topic}:{','.join(map(str, sorted(self.owned)))}")
        self.changes.append((time.time_ns() // 1000, self.spelled()))

    def on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        self.owned -= {p.partition for p in partitions}
        self.changes.append((time.time_ns() // 1000, self.spelled()))

    def spelled(self) -> str:
        """What it owns as the `groups` table's `assignment` spells it ("" for nothing)."""
        return f"{self.topic}:{','.join(map(str, sorted(self.owned)))}" if self.owned else ""

    def subscribe(self, bootstrap: str, group: str, config: dict[str, Any]) -> None:
        from confluent_kafka import Consumer

        self.consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": group, "client.id": self.name, **config}
        )
        self.consumer.subscribe([self.topic], on_assign=self.on_assign, on_revoke=self.on_revoke)


def poll_until(members: list[Member], done: Callable[[], Any], deadline_s: float) -> None:
    """Polls the members (their callbacks run inside poll) until ``done()``, within ``deadline_s``."""
    deadline = time.monotonic() + deadline_s
    for _ in range(POLL_ROUNDS):
        for m in members:
            m.consumer.poll(0.05)
        if done():
            return
        if time.monotonic() > deadline:
            break
    raise TimeoutError(f"group did not settle: {[(m.name, sorted(m.owned)) for m in members]}")


def describe(bootstrap: str, topic: str) -> None:
    """One Metadata request for ``topic``: the coordinator learns the topic id from its answer."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": "kwsniff-admin"})
    admin.describe_topics(TopicCollection([topic]))[topic].result(10)


@dataclass
class Coordinated:
    bootstrap: str  # the coordinator's address: clients see only it
    port: int
    log: Path  # what the coordinator sent, a JSON line each


@contextmanager
def coordinated_broker(tmp: Path, topic: str, partitions: int) -> Iterator[Coordinated]:
    """tansu behind the test coordinator, both stopped by PID at the end."""
    proxy_port, broker_port = free_ports(2)
    log = tmp / "coordinator.jsonl"
    with start_broker(broker_port, advertised_port=proxy_port, log_dir=str(tmp)):
        command = [sys.executable, str(TESTS / "group_coordinator.py"), str(proxy_port), str(broker_port)]
        coordinator = subprocess.Popen([*command, topic, str(partitions), str(log)])
        try:
            wait_for_listener(proxy_port)
            yield Coordinated(f"{LOOPBACK}:{proxy_port}", proxy_port, log)
        finally:
            stop_process(coordinator)
