"""Which broker answered: the node id behind each connection's broker address (docs/tables.md,
"Which broker answered").

A connection shows the broker only as an address (ip, port). Node ids are learned from responses that
list brokers, on any connection: Metadata (`brokers`: node_id, host, port), DescribeCluster
(`brokers`: broker_id, host, port) and FindCoordinator (node_id/host/port, v4+ `coordinators`). A
listed host that is an IP literal names its address at once. A host name is linked to an address only
when a Metadata or DescribeCluster response decides it: the broker that answered is one of those it
lists, so when exactly one listed broker can be the connection's broker (same port, and its host an
IP literal equal to the connection's address or a name not already linked to another address), that
broker is the one, and its name is linked to the connection's address. `--broker-map` entries are
fixed and win over what is learned.

The directory (:class:`BrokerDirectory`) lives as long as the run's SessionOptions, so what one
capture of a run taught names the rows of the captures after it. Rows of a capture whose broker has
no node id yet are held (:class:`BrokerIds`, bounded like the rows waiting for a topic name) and
written when a later response names the node, or at the end of the capture with a null id.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

METADATA, FIND_COORDINATOR, DESCRIBE_CLUSTER = 3, 10, 60
BROKER_SOURCES = frozenset({METADATA, FIND_COORDINATOR, DESCRIBE_CLUSTER})
# Tables whose rows carry broker_ip, broker_port and broker_id.
BROKER_TABLES = frozenset({"requests", "partitions", "errors", "groups"})
# Rows held for a node id, over all brokers of a capture; past it rows are written with a null id
# and counted (a capture without a Metadata response would otherwise hold every row).
MAX_HELD_BROKER_ROWS = 20_000
# Rows held for one broker. The response naming a broker comes within a connection's first exchanges
# (ApiVersions, SASL, then Metadata) or another connection's; a broker that has answered this many
# rows unnamed was met by clients whose Metadata came before the capture began, and holding more
# would only make memory grow with the capture: its rows are written without an id, and counted,
# until a response names it.
MAX_HELD_PER_BROKER = 256

Endpoint = tuple[str, int]  # (address as kwsniff.net.format_ip writes it, port)


def ip_literal(host: Any) -> str | None:
    """``host`` in kwsniff.net.format_ip's form when it is an IP address, else None."""
    if not isinstance(host, str) or not host:
        return None
    try:
        return str(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return None


def listed_brokers(api_key: int, msg: dict[str, Any]) -> list[tuple[int, str, int]]:
    """(node id, host, port) of every broker a Metadata, DescribeCluster or FindCoordinator response
    lists (a FindCoordinator error answers node -1, which is no broker)."""
    if api_key == FIND_COORDINATOR:
        entries: list[dict[str, Any]] = msg.get("coordinators") or [msg]
        id_key = "node_id"
    else:
        entries = msg.get("brokers") or []
        id_key = "broker_id" if api_key == DESCRIBE_CLUSTER else "node_id"
    out = []
    for entry in entries:
        node, host, port = entry.get(id_key), entry.get("host"), entry.get("port")
        if isinstance(node, int) and node >= 0 and isinstance(host, str) and host and isinstance(port, int):
            out.append((node, host, port))
    return out


@dataclass
class BrokerDirectory:
    """Node ids of broker addresses for one run: ``fixed`` from --broker-map, ``learned`` from
    responses; ``names`` links advertised host names to the addresses they were seen at."""

    fixed: dict[Endpoint, int] = field(default_factory=dict)
    learned: dict[Endpoint, int] = field(default_factory=dict)
    names: dict[Endpoint, str] = field(default_factory=dict)  # (host name, port) -> address
    conflicts: int = 0  # responses that gave a known address another node id (the first is kept)
    _by_node: dict[tuple[int, int], list[str]] | None = field(default=None, repr=False)

    def node(self, endpoint: Endpoint) -> int | None:
        node = self.fixed.get(endpoint)
        return node if node is not None else self.learned.get(endpoint)

    def learn(self, api_key: int, msg: dict[str, Any], broker: Endpoint) -> bool:
        """Learn from a response that ``broker`` sent; True when an address got a node id."""
        listed = listed_brokers(api_key, msg)
        if not listed:
            return False
        new = False
        for node, host, port in listed:
            ip = ip_literal(host)
            if ip is None:
                ip = self.names.get((host, port))
            if ip is None:
                # --broker-map gave this node's address on this port (one only): the name is there.
                mapped = self._mapped().get((node, port), ())
                if len(mapped) == 1:
                    ip = self.names[(host, port)] = mapped[0]
            if ip is not None:
                new |= self._set((ip, port), node)
        if api_key != FIND_COORDINATOR:
            # The broker that answered is one of those listed (FindCoordinator names another one).
            address, port = broker
            candidates = [
                (node, host)
                for node, host, p in listed
                if p == port
                and (
                    ip_literal(host) == address
                    if ip_literal(host) is not None
                    else self._may_be(host, port, address)
                )
            ]
            if len(candidates) == 1:
                node, host = candidates[0]
                if ip_literal(host) is None:  # an IP literal was taken above
                    self.names[(host, port)] = address
                    new |= self._set(broker, node)
        return new

    def _mapped(self) -> dict[tuple[int, int], list[str]]:
        """--broker-map's addresses of each (node id, port), worked out once."""
        if self._by_node is None:
            self._by_node = {}
            for (address, port), node in self.fixed.items():
                self._by_node.setdefault((node, port), []).append(address)
        return self._by_node

    def _may_be(self, host: str, port: int, address: str) -> bool:
        linked = self.names.get((host, port))
        return linked is None or linked == address

    def _set(self, endpoint: Endpoint, node: int) -> bool:
        known = self.learned.get(endpoint)
        if known == node:
            return False
        if known is not None:
            self.conflicts += 1
            return False
        self.learned[endpoint] = node
        return True


class BrokerIds:
    """Writes the rows of BROKER_TABLES with their broker's node id, holding those whose broker has
    none yet (``hold``; `show` prints as it goes and does not hold). Other tables pass through."""

    def __init__(
        self,
        sink: Any,
        directory: BrokerDirectory,
        *,
        hold: bool = True,
        max_held: int = MAX_HELD_BROKER_ROWS,
    ) -> None:
        self.sink = sink
        self.directory = directory
        self.hold = hold
        self.max_held = max_held
        # Per broker, (table, row dict or (values, broker_id's position)) in the order they came.
        self.held: dict[Endpoint, list[tuple[str, Any]]] = {}
        self.held_count = 0
        self.held_overflow = 0  # rows written without a node id because the hold was full
        self.given_up: set[Endpoint] = set()  # brokers past MAX_HELD_PER_BROKER held rows
        self.unresolved = 0  # held rows whose broker no response named by the end of the capture

    def add(self, table: str, row: dict[str, Any]) -> None:
        # Rows come with broker_id when their connection's broker was known as the exchange ended.
        if table in BROKER_TABLES and row.get("broker_id") is None:
            endpoint = (row.get("broker_ip"), row.get("broker_port"))
            node = self.directory.node(endpoint)  # type: ignore[arg-type]
            if node is None and self.hold and endpoint[0] is not None:
                if self._held(endpoint, (table, row)):  # type: ignore[arg-type]
                    return
                self.held_overflow += 1
            row["broker_id"] = node
        self.sink.add(table, row)

    def add_values(self, table: str, values: tuple[Any, ...], endpoint: Endpoint, at: int) -> None:
        """A row as values in the sink's column order (the compiled `partitions` path,
        builder.ExchangeRows._partition_values), its broker_id at ``at``: held like :meth:`add`'s."""
        node = values[at]
        if node is None:
            node = self.directory.node(endpoint)
            if node is None and self.hold:
                if self._held(endpoint, (table, (values, at))):
                    return
                self.held_overflow += 1
            values = (*values[:at], node, *values[at + 1 :])
        self.sink.add_values(table, values)

    def _held(self, endpoint: Endpoint, entry: tuple[str, Any]) -> bool:
        """Hold one row for ``endpoint``'s node id, if the holds have room. A broker whose hold
        reaches MAX_HELD_PER_BROKER is given up: its held rows are written without an id (counted as
        overflow), and so are its next ones until a response names it."""
        if endpoint in self.given_up or self.held_count >= self.max_held:
            return False
        rows = self.held.setdefault(endpoint, [])
        if len(rows) >= MAX_HELD_PER_BROKER:
            self.given_up.add(endpoint)
            del self.held[endpoint]
            self.held_count -= len(rows)
            self.held_overflow += len(rows)
            for table, row in rows:
                self._write(table, row, None)
            return False
        rows.append(entry)
        self.held_count += 1
        return True

    def _write(self, table: str, row: Any, node: int | None) -> None:
        """A held row with its node id: a row dict, or (values, broker_id's position) from add_values."""
        if isinstance(row, tuple):
            values, at = row
            self.sink.add_values(table, (*values[:at], node, *values[at + 1 :]))
        else:
            row["broker_id"] = node
            self.sink.add(table, row)

    def learn(self, api_key: int, msg: dict[str, Any], broker: Endpoint) -> None:
        if self.directory.learn(api_key, msg, broker) and self.held:
            self.release()

    def share(self, ids: list[tuple[Endpoint, int]]) -> None:
        """Node ids another process of the run learned (`capture --workers`): taken where this one
        knows none yet, and the rows held for them written."""
        learned = self.directory.learned
        for endpoint, node in ids:
            learned.setdefault(tuple(endpoint), node)  # type: ignore[arg-type]
        if self.held:
            self.release()

    def release(self) -> None:
        """Write the held rows whose broker now has a node id."""
        node_of = self.directory.node
        for endpoint in [e for e in self.held if node_of(e) is not None]:
            node = node_of(endpoint)
            rows = self.held.pop(endpoint)
            self.held_count -= len(rows)
            for table, row in rows:
                self._write(table, row, node)

    def finish(self) -> None:
        """End of the capture: held rows are written, their broker named or not."""
        self.release()
        for rows in self.held.values():
            self.unresolved += len(rows)
            for table, row in rows:
                self._write(table, row, None)
        self.held = {}
        self.held_count = 0
