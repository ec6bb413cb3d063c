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

Whose word counts: a broker's own answers about its own address (a response on a connection whose
broker end is that address) come before any other host's claim. An id only another host gave is
provisional (``heard``): rows are held for the broker's own word as for an unknown id, and written
with the heard id only when the capture ends or the hold is full. Claims that disagree are counted
and kept (a few addresses, a few claimers each) for the summary and the `captures` table; they are
never settled by arrival order alone.

The directory (:class:`BrokerDirectory`) lives as long as the run's SessionOptions, so what one
capture of a run taught names the rows of the captures after it. Rows of a capture whose broker has
no node id yet are held (:class:`BrokerIds`, bounded like the rows waiting for a topic name) and
written when a later response names the node, or at the end of the capture with a null id. What it
learns is held in the brokers pool of the run's memory budget (kwsniff.memory): past it the
hearsay goes first, then the oldest name links and addresses, counted (docs/memory.md).
"""

from __future__ import annotations

import ipaddress
import socket
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
# Bytes one learned address costs besides its address text: its (ip, port) key, the id and the dict
# slot (tracemalloc over 200k addresses: about 200 B with a dotted quad); an id only another host gave adds its entry in
# `heard` (about 110 B); a linked host name costs NAME_COST plus its text.
ADDRESS_COST = 200
HEARD_COST = 120
NAME_COST = 200
# Under pressure the map is evicted down to this part of its cap (one scan buys room for many).
EVICT_TO = 7 / 8
# Addresses whose conflicting claims are kept for the summary (each with a few claimers per id);
# more are counted only.
MAX_DISPUTES = 8
MAX_CLAIMERS = 3

Endpoint = tuple[str, int]  # (address as kwsniff.net.format_ip writes it, port)


def ip_literal(host: Any) -> str | None:
    """``host`` in kwsniff.net.format_ip's form when it is an IP address, else None."""
    if not isinstance(host, str) or not host:
        return None
    try:
        # The common case, a dotted quad already in its canonical form, without ipaddress's parser
        # (about 15 us a host: the cost of a Metadata response listing tens of thousands of brokers).
        if socket.inet_ntop(socket.AF_INET, socket.inet_pton(socket.AF_INET, host)) == host:
            return host
    except (OSError, ValueError):
        pass
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
    responses (``heard``: those only another host gave, and that host); ``names`` links advertised
    host names to the addresses they were seen at."""

    fixed: dict[Endpoint, int] = field(default_factory=dict)
    learned: dict[Endpoint, int] = field(default_factory=dict)
    heard: dict[Endpoint, Endpoint] = field(default_factory=dict)  # address -> the host that named it
    names: dict[Endpoint, str] = field(default_factory=dict)  # (host name, port) -> address
    conflicts: int = 0  # claims that gave an address another node id than the one it had
    # Of the first MAX_DISPUTES addresses in conflict: each id claimed, and who claimed it (the
    # address itself for a broker's own word).
    disputes: dict[Endpoint, dict[int, list[Endpoint]]] = field(default_factory=dict)
    held: int = 0  # bytes the learned addresses and names cost (ADDRESS_COST, HEARD_COST, NAME_COST)
    cap: int | None = None  # most bytes held (None: no cap until a session binds its budget)
    evicted: int = 0  # addresses and name links evicted for the cap
    evicted_bytes: int = 0
    _cell: list[int] | None = field(default=None, repr=False)
    _by_node: dict[tuple[int, int], list[str]] | None = field(default=None, repr=False)

    def node(self, endpoint: Endpoint) -> int | None:
        """The address's node id: --broker-map's, else the one learned (heard ones too)."""
        node = self.fixed.get(endpoint)
        return node if node is not None else self.learned.get(endpoint)

    def firm(self, endpoint: Endpoint) -> int | None:
        """The address's node id when --broker-map or the broker's own answer gave it; None while
        only another host's claim names it (rows wait for the broker's word)."""
        node = self.fixed.get(endpoint)
        if node is not None:
            return node
        return None if endpoint in self.heard else self.learned.get(endpoint)

    def learn(self, api_key: int, msg: dict[str, Any], broker: Endpoint) -> bool:
        """Learn from a response that ``broker`` sent; True when an address got a firm node id."""
        listed = listed_brokers(api_key, msg)
        if not listed:
            return False
        new = False
        literals = [ip_literal(host) for _, host, _ in listed]
        for (node, host, port), ip in zip(listed, literals, strict=True):
            if ip is None:
                ip = self.names.get((host, port))
            if ip is None:
                # --broker-map gave this node's address on this port (one only): the name is there.
                mapped = self._mapped().get((node, port), ())
                if len(mapped) == 1:
                    ip = mapped[0]
                    self._link(host, port, ip)
            if ip is not None:
                new |= self._claim((ip, port), node, broker)
        if api_key != FIND_COORDINATOR:
            # The broker that answered is one of those listed (FindCoordinator names another one).
            address, port = broker
            candidates = [
                (node, host, ip)
                for (node, host, p), ip in zip(listed, literals, strict=True)
                if p == port and (ip == address if ip is not None else self._may_be(host, port, address))
            ]
            if len(candidates) == 1:
                node, host, ip = candidates[0]
                if ip is None:  # an IP literal was taken above
                    self._link(host, port, address)
                    new |= self._claim(broker, node, broker)
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

    def _link(self, host: str, port: int, address: str) -> None:
        if (host, port) not in self.names:
            self._charge(NAME_COST + len(host))
        self.names[(host, port)] = address

    def _claim(self, endpoint: Endpoint, node: int, claimer: Endpoint) -> bool:
        """``claimer`` (the broker end of the connection the response came on) says ``endpoint`` is
        ``node``. True when the address got a firm id: the broker's own word, first or over hearsay."""
        if endpoint in self.fixed:
            return False  # the operator's word (--broker-map) is above every claim
        own = claimer == endpoint
        known = self.learned.get(endpoint)
        if known is None:
            self.learned[endpoint] = node
            cost = ADDRESS_COST + len(endpoint[0])
            if not own:
                self.heard[endpoint] = claimer
                cost += HEARD_COST
            self._charge(cost)
            return own
        heard_from = self.heard.get(endpoint)
        if known == node:
            if own and heard_from is not None:  # the broker confirms what another host said
                del self.heard[endpoint]
                self._charge(-HEARD_COST)
                return True
            return False
        self.conflicts += 1
        wins = own and heard_from is not None
        if wins:
            # The broker's own word about its address wins over another host's claim.
            self.learned[endpoint] = node
            del self.heard[endpoint]
            self._charge(-HEARD_COST)
        # Otherwise the id already held stays: the broker's own (over another host's claim, or over
        # a later answer of the broker itself: a broker replaced under the same address), or the
        # first heard while the broker has not spoken.
        self._dispute(
            endpoint,
            (node, claimer) if wins else (known, heard_from or endpoint),
            (known, heard_from or endpoint) if wins else (node, claimer),
        )
        return wins

    def _dispute(self, endpoint: Endpoint, kept: tuple[int, Endpoint], other: tuple[int, Endpoint]) -> None:
        """Keep who claimed what of the first MAX_DISPUTES addresses: the id kept first."""
        claims = self.disputes.get(endpoint)
        if claims is None:
            if len(self.disputes) >= MAX_DISPUTES:
                return
            claims = self.disputes[endpoint] = {}
        elif kept[0] != next(iter(claims)):
            claims = self.disputes[endpoint] = {kept[0]: claims.pop(kept[0], []), **claims}
        for n, who in (kept, other):
            by = claims.setdefault(n, [])
            if who not in by and len(by) < MAX_CLAIMERS:
                by.append(who)

    def take_conflicts(self) -> tuple[int, dict[Endpoint, dict[int, list[Endpoint]]]]:
        """(conflicting claims, the disputes kept) since the last call: a session reports them once."""
        taken = self.conflicts, self.disputes
        self.conflicts, self.disputes = 0, {}
        return taken

    def owned(self) -> list[tuple[Endpoint, int]]:
        """(address, node id) of every address whose id came from the broker's own answer."""
        heard = self.heard
        return [(e, n) for e, n in self.learned.items() if e not in heard]

    def adopt(self, endpoint: Endpoint, node: int) -> bool:
        """A broker's own word that another process of the run heard (`capture --workers`): taken
        where this one has none or only another host's; True when it names the address now."""
        known = self.learned.get(endpoint)
        if known is not None and endpoint not in self.heard:
            return False
        if known is None:
            self.learned[endpoint] = node
            self._charge(ADDRESS_COST + len(endpoint[0]))
        else:
            self.learned[endpoint] = node
            del self.heard[endpoint]
            self._charge(-HEARD_COST)
        return True

    # -- the brokers pool of the memory budget ------------------------------------------------------
    def bound(self, cell: list[int] | None, cap: int) -> None:
        """Hold the map in a budget's pool (``cell``, kwsniff.memory) of ``cap`` bytes: what is held
        now is charged to it, and the map is evicted while it is over. ``None`` lets go of the pool."""
        if self._cell is not None:
            self._cell[0] -= self.held
        self._cell = cell
        if cell is not None:
            cell[0] += self.held
        self.cap = cap
        if self.held > cap:
            self._evict()

    def take_evicted(self) -> tuple[int, int]:
        """(entries, bytes) evicted since the last call: a session reports them once."""
        taken = self.evicted, self.evicted_bytes
        self.evicted = self.evicted_bytes = 0
        return taken

    def _charge(self, n: int) -> None:
        """Count ``n`` bytes more (or fewer) held; past the cap the map is evicted at once, so one
        response listing thousands of brokers never holds more than its cap."""
        self.held += n
        if self._cell is not None:
            self._cell[0] += n
        if n > 0 and self.cap is not None and self.held > self.cap:
            self._evict()

    def _evict(self) -> None:
        """Down to EVICT_TO of the cap: first the ids only another host gave (oldest first), then
        the oldest name links, then the oldest addresses (Suricata's memcap rule), counted."""
        if self.cap is None:
            return
        over = self.held - int(self.cap * EVICT_TO)
        # One pass over each dict in insertion order, then the deletions: popping the first key
        # again and again would rescan the holes the earlier pops left (quadratic).
        heard, freed = self._oldest(self.heard, over, lambda e: ADDRESS_COST + HEARD_COST + len(e[0]))
        for endpoint in heard:
            del self.heard[endpoint], self.learned[endpoint]
        names, more = self._oldest(self.names, over - freed, lambda k: NAME_COST + len(k[0]))
        for key in names:
            del self.names[key]
        freed += more
        learned, more = self._oldest(self.learned, over - freed, lambda e: ADDRESS_COST + len(e[0]))
        for endpoint in learned:
            del self.learned[endpoint]
        freed += more
        self._charge(-freed)
        self.evicted += len(heard) + len(names) + len(learned)
        self.evicted_bytes += freed

    @staticmethod
    def _oldest(entries: dict[Any, Any], need: int, cost: Any) -> tuple[list[Any], int]:
        """The oldest keys of ``entries`` whose costs add up to ``need`` bytes (all, if they do not)."""
        keys, freed = [], 0
        if need > 0:
            for key in entries:
                keys.append(key)
                freed += cost(key)
                if freed >= need:
                    break
        return keys, freed


def merged_disputes(
    disputes: list[dict[Endpoint, dict[int, list[Endpoint]]]],
) -> dict[Endpoint, dict[int, list[Endpoint]]]:
    """The disputes several processes of a run kept (`capture --workers`), as one: the first
    MAX_DISPUTES addresses, each id's claimers once (MAX_CLAIMERS at most)."""
    out: dict[Endpoint, dict[int, list[Endpoint]]] = {}
    for kept in disputes:
        for endpoint, claims in kept.items():
            if endpoint not in out and len(out) >= MAX_DISPUTES:
                continue
            mine = out.setdefault(endpoint, {})
            for node, by in claims.items():
                have = mine.setdefault(node, [])
                have += [c for c in by if c not in have][: MAX_CLAIMERS - len(have)]
    return out


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
            if self.hold and endpoint[0] is not None:
                node = self.directory.firm(endpoint)  # type: ignore[arg-type]
                if node is None:
                    if self._held(endpoint, (table, row)):  # type: ignore[arg-type]
                        return
                    node = self._unheld(endpoint)  # type: ignore[arg-type]
            else:
                node = self.directory.node(endpoint)  # type: ignore[arg-type]
            row["broker_id"] = node
        self.sink.add(table, row)

    def add_values(self, table: str, values: tuple[Any, ...], endpoint: Endpoint, at: int) -> None:
        """A row as values in the sink's column order (the compiled `partitions` path,
        builder.ExchangeRows._partition_values), its broker_id at ``at``: held like :meth:`add`'s."""
        node = values[at]
        if node is None:
            if self.hold:
                node = self.directory.firm(endpoint)
                if node is None:
                    if self._held(endpoint, (table, (values, at))):
                        return
                    node = self._unheld(endpoint)
            else:
                node = self.directory.node(endpoint)
            values = (*values[:at], node, *values[at + 1 :])
        self.sink.add_values(table, values)

    def _unheld(self, endpoint: Endpoint) -> int | None:
        """The id of a row the holds had no room for: the one another host gave, if any; a row
        written without one is counted."""
        node = self.directory.node(endpoint)
        if node is None:
            self.held_overflow += 1
        return node

    def _held(self, endpoint: Endpoint, entry: tuple[str, Any]) -> bool:
        """Hold one row for ``endpoint``'s node id (or its broker's own word), if the holds have
        room. A broker whose hold reaches MAX_HELD_PER_BROKER is given up: its held rows are written
        with the id another host gave, or without one (counted as overflow), and so are its next
        ones until its broker's answer names it."""
        if endpoint in self.given_up or self.held_count >= self.max_held:
            return False
        rows = self.held.setdefault(endpoint, [])
        if len(rows) >= MAX_HELD_PER_BROKER:
            self.given_up.add(endpoint)
            del self.held[endpoint]
            self.held_count -= len(rows)
            node = self.directory.node(endpoint)
            if node is None:
                self.held_overflow += len(rows)
            for table, row in rows:
                self._write(table, row, node)
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
        """Node ids another process of the run learned from the brokers' own answers (`capture
        --workers`): taken where this one knows none yet or only another host's, and the rows held
        for them written."""
        adopt = self.directory.adopt
        for endpoint, node in ids:
            adopt(tuple(endpoint), node)  # type: ignore[arg-type]
        if self.held:
            self.release()

    def release(self) -> None:
        """Write the held rows whose broker now has a firm node id (its own word, or --broker-map's)."""
        node_of = self.directory.firm
        for endpoint in [e for e in self.held if node_of(e) is not None]:
            node = node_of(endpoint)
            rows = self.held.pop(endpoint)
            self.held_count -= len(rows)
            for table, row in rows:
                self._write(table, row, node)

    def finish(self) -> None:
        """End of the capture: held rows are written, with the id another host gave their broker
        when its own answer never came, or without one (counted as unresolved)."""
        self.release()
        node_of = self.directory.node
        for endpoint, rows in self.held.items():
            node = node_of(endpoint)
            if node is None:
                self.unresolved += len(rows)
            for table, row in rows:
                self._write(table, row, node)
        self.held = {}
        self.held_count = 0
