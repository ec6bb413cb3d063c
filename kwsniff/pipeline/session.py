"""One pass over the packets of one capture: TCP connections, Kafka detection, rows out. No I/O.

The session is the only place that sees every packet, so its per-packet path is kept to a parse,
a dict lookup and a reassembler call. Everything that happens per frame or per connection lives in
:mod:`kwsniff.kafka` and :mod:`kwsniff.rows`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import cast

from kwsniff.defaults import DEFAULT_BROKER_PORT, MAX_DECOMPRESSED, MAX_FRAME_SIZE
from kwsniff.kafka import FrameSplitter
from kwsniff.memory import (
    BROKERS,
    CONNECTION_COST,
    DEFAULT_MEMORY_LIMIT,
    FLOWS,
    FRAGMENTS,
    REASSEMBLY,
    SECRETS,
    MemoryBudget,
)
from kwsniff.net import (
    ACK,
    COPY_WITHIN_US,
    FRAGMENT_BYTES,
    GENEVE_PORTS,
    MAX_DEPTH,
    SYN,
    VXLAN_PORTS,
    Carried,
    Decapsulator,
    DuplicateFilter,
    TcpPacket,
    parse_tcp,
)
from kwsniff.pipeline.connection import B2C, C2B, EVICTED, IDLE, Connection, accounting_difference
from kwsniff.rows import ExchangeRows, RecordOptions, RowSink, TableBuilder
from kwsniff.rows.brokers import BrokerDirectory
from kwsniff.tcp import TcpReassembler
from kwsniff.tls import KeyLog

# The compiled common-case packet path (_fastpath.c), unless KWSNIFF_PURE_PYTHON=1 asks for the pure
# one or the extension was not built (no compiler at install time): both give the same tables.
FastPath = None
if os.environ.get("KWSNIFF_PURE_PYTHON", "") != "1":
    try:
        from kwsniff.pipeline._fastpath import FastPath  # type: ignore[import-not-found,no-redef]
    except ImportError:
        FastPath = None

# Closed connections are forgotten once the capture clock has moved this far past them, so a
# capture of many short connections keeps bounded memory (late retransmissions are still absorbed).
FORGET_CLOSED_US = 120_000_000
# What parse_tcp says of a frame that may still carry TCP inside a tunnel, label stack or fragments.
_CARRIERS = frozenset(("not_tcp", "not_ip", "ip_fragment"))
# Connections with no packet for this long, by capture time, are closed as idle (`capture
# --idle-timeout`, `read --idle-timeout`); 0 never.
IDLE_TIMEOUT_US = 900_000_000
# Under memory pressure, state is evicted down to this part of its pool's cap, so that one eviction
# scan (over every open connection) buys room for many packets, not one.
EVICT_TO = 7 / 8


@dataclass
class SessionOptions:
    broker_ports: frozenset[int] = frozenset({DEFAULT_BROKER_PORT})
    auto_detect: bool = True
    max_frame_size: int = MAX_FRAME_SIZE
    max_ooo_bytes: int = 8 * 1024 * 1024
    records: bool = False  # rows of the `records` table (decompresses every batch)
    record_payloads: bool = False  # key and value bytes in those rows
    max_decompressed: int = MAX_DECOMPRESSED  # per batch; a batch past it is counted as capped
    keylog: KeyLog | None = None  # TLS secrets (`--keylog`); pcapng Decryption Secrets Blocks add to it
    vxlan_ports: frozenset[int] = VXLAN_PORTS  # UDP ports decapsulated as VXLAN
    geneve_ports: frozenset[int] = GENEVE_PORTS  # and as Geneve
    max_tunnel_depth: int = MAX_DEPTH  # tunnels (and MPLS stacks) followed inside one another
    fragment_bytes: int = FRAGMENT_BYTES  # IP fragments held for reassembly; the oldest go past it
    memory_limit: int = DEFAULT_MEMORY_LIMIT  # the run's budget (kwsniff.memory, docs/memory.md)
    idle_timeout_us: int = IDLE_TIMEOUT_US  # capture time without a packet before a connection ends
    # (worker, workers): this session numbers connections worker+1, worker+1+workers, ..., so the
    # workers of one live capture (`--workers`) never give two connections the same conn_id.
    conn_ids: tuple[int, int] = (0, 1)
    # Added to every conn_id: a worker started in place of one that died numbers its connections
    # from here, above any the one before it can have numbered.
    conn_id_base: int = 0
    # Node ids of broker addresses (--broker-map's, and those learned from responses): one directory
    # shared by every Session of a run, so a capture's rows are named by what the captures before it
    # taught; None gives each Session its own (docs/tables.md "Which broker answered").
    brokers: BrokerDirectory | None = None


@dataclass
class SessionStats:
    packets: int = 0
    skipped_packets: dict[str, int] = field(default_factory=dict)
    kafka_connections: int = 0
    non_kafka_connections: int = 0
    not_kafka_on_broker_ports: int = 0  # connections to a broker port that did not speak Kafka
    accounting_mismatches: int = 0  # connections whose bytes do not add up (a bug if ever non-zero)
    uncaptured_bytes: int = 0  # stream bytes of closed connections a snap length did not keep (in gap_bytes)
    duplicate_packets: int = 0  # copies of a packet already seen (two mirror sessions or tunnel ids)
    decapsulated: dict[str, int] = field(default_factory=dict)  # packets by tunnel kind (each level)
    tunnel_overhead_bytes: int = 0  # tunnel headers around decapsulated packets: not stream bytes
    fragments: dict[str, int] = field(default_factory=dict)  # kwsniff.net.fragments.FragmentStats
    idle_connections: int = 0  # closed after idle_timeout_us of capture time without a packet
    evicted_connections: int = 0  # closed to stay under the memory limit (connections.expired)
    evicted_bytes: int = 0  # reassembly bytes those held (partial frames, out-of-order segments)
    forgotten_early: int = 0  # closed connections forgotten before FORGET_CLOSED_US, for memory
    secrets_evicted: int = 0  # TLS secrets (key log, Decryption Secrets Blocks) evicted for memory
    secrets_evicted_bytes: int = 0  # what they cost in the secrets pool
    brokers_evicted: int = 0  # broker map entries (addresses, name links) evicted for memory
    brokers_evicted_bytes: int = 0  # what they cost in the brokers pool
    # Claims that gave a broker address another node id than it had (kwsniff.rows.brokers), and of
    # the first few addresses: each id claimed and who claimed it ((ip, port), the address itself
    # for the broker's own answer).
    broker_conflicts: int = 0
    broker_disputes: dict[tuple[str, int], dict[int, list[tuple[str, int]]]] = field(default_factory=dict)


class Session:
    """Feed packets of one capture with :meth:`packet`; call :meth:`finish` at the end."""

    def __init__(
        self,
        capture: str,
        sink: RowSink,
        options: SessionOptions | None = None,
        *,
        keep_messages: bool = False,
    ) -> None:
        self.capture = capture
        self.options = options or SessionOptions()
        self.stats = SessionStats()
        self.flows: dict[tuple[bytes, int, bytes, int], tuple[Connection, int]] = {}
        self.brokers: set[tuple[bytes, int]] = set()
        opts = self.options
        self.budget = budget = MemoryBudget(opts.memory_limit)
        # The reassembly pool's counter, shared by every reassembler and frame splitter.
        self.held = budget.cell(REASSEMBLY)
        self._held_cap = budget.cap(REASSEMBLY)
        self._held_trigger = self._held_cap  # above the cap only if eviction could not get under it
        self._flows_cell = budget.cell(FLOWS)
        # Flow-table entries (two per connection) the flows pool has room for.
        self._max_entries = 2 * max(16, budget.cap(FLOWS) // CONNECTION_COST)
        self.rows = TableBuilder(
            capture,
            sink,
            keep_messages=keep_messages,
            record_options=RecordOptions(
                records=opts.records or opts.record_payloads,
                payloads=opts.record_payloads,
                max_decompressed=opts.max_decompressed,
                budget=budget,
            ),
            brokers=opts.brokers,
        )
        # The broker map outlives the session (one per run): held in the brokers share while we run.
        self.rows.node_ids.directory.bound(budget.cell(BROKERS), budget.cap(BROKERS))
        self._next_id = 0
        self._swept = 0
        # Closed connections whose flow entries still absorb late packets, oldest first.
        self._closed: dict[int, Connection] = {}
        # Fragments are held within their share of the budget, whatever fragment_bytes asks (the CLI
        # refuses more; a live capture's workers each get a part of the limit).
        self.decap = Decapsulator(
            opts.vxlan_ports,
            opts.geneve_ports,
            opts.max_tunnel_depth,
            min(opts.fragment_bytes, budget.cap(FRAGMENTS)),
        )
        self.duplicates = DuplicateFilter()
        # Secrets of `--keylog`, and of any Decryption Secrets Block the capture carries.
        # They are held in the secrets share of the budget: past it the oldest are evicted, counted.
        self.keys: KeyLog | None = opts.keylog
        if self.keys is not None:
            self.keys.bound(budget.cell(SECRETS), budget.cap(SECRETS))
        if FastPath is not None and type(self).packet is _PURE_PACKET:
            # The compiled path handles the common packet and hands every other one to the method
            # below (a subclass or a test that replaces the method keeps the pure path).
            self.packet = FastPath(  # type: ignore[method-assign]
                self,
                _PURE_PACKET,
                Connection,
                TcpReassembler,
                FrameSplitter,
                COPY_WITHIN_US,
                FORGET_CLOSED_US,
            ).packet

    def add_secrets(self, text: bytes) -> None:
        """TLS key log text from the capture itself (a pcapng Decryption Secrets Block)."""
        if self.keys is None:
            self.keys = KeyLog()
            self.keys.bound(self.budget.cell(SECRETS), self.budget.cap(SECRETS))
        self.keys.add_text(text)
        self.keys.end()

    def is_broker(self, endpoint: tuple[bytes, int]) -> bool:
        return endpoint[1] in self.options.broker_ports or endpoint in self.brokers

    def learn_broker(self, endpoint: tuple[bytes, int]) -> None:
        """A connection proved Kafka (a decoded exchange): later connections there are trusted,
        mid-stream ones included."""
        if self.options.auto_detect:
            self.brokers.add(endpoint)

    def forget_broker(self, endpoint: tuple[bytes, int]) -> None:
        """A connection opened there did not speak Kafka: the endpoint is no longer trusted."""
        self.brokers.discard(endpoint)

    def packet(self, ts: int, linktype: int, data: bytes) -> None:
        # _fastpath.c repeats this method's common case (and Connection.packet's, TcpReassembler's
        # and FrameSplitter.data's): a change here must be made there too (tests/test_fastpath.py).
        stats = self.stats
        stats.packets += 1
        p = parse_tcp(linktype, data)
        if type(p) is str:
            if p in _CARRIERS:
                self._carried(ts, linktype, data)
                return
            skipped = stats.skipped_packets
            skipped[p] = skipped.get(p, 0) + 1
            return
        src, sport, dst, dport, seq, ack, flags, payload, missing = cast(TcpPacket, p)
        entry = self.flows.get((src, sport, dst, dport))
        # Everything before the payload: two copies of one frame share it, a retransmission does
        # not (the rule and its limit: kwsniff.net.duplicates). A 4-tuple per direction, newest first.
        key = data[: -len(payload)] if payload else data
        if entry is None:
            entry = self._new_connection(ts, src, sport, dst, dport, flags)
            entry[0].recent[entry[1]] = (key, b"", b"", b"")
        else:
            conn = entry[0]
            window = conn.recent[entry[1]]
            if key in window and ts - conn.ts_last < COPY_WITHIN_US:
                stats.duplicate_packets += 1
                conn.duplicate_packets += 1
                return
            conn.recent[entry[1]] = (key, window[0], window[1], window[2])
            if conn.closed:
                if not flags & SYN or flags & ACK:
                    return  # a late packet of a closed connection (a retransmission, a last ACK)
                entry = self._new_connection(ts, src, sport, dst, dport, flags)
                entry[0].recent[entry[1]] = (key, b"", b"", b"")
        entry[0].packet(entry[1], ts, seq, ack, flags, payload, missing)
        if self.held[0] > self._held_trigger:
            self._evict_largest(ts)
        if ts - self._swept > FORGET_CLOSED_US:
            self._sweep(ts)

    def _carried(self, ts: int, linktype: int, data: bytes) -> None:
        """A frame off the plain path: decapsulated, reassembled and deduplicated, then delivered."""
        stats = self.stats
        c = self.decap.parse(ts, linktype, data)
        if type(c) is str:
            stats.skipped_packets[c] = stats.skipped_packets.get(c, 0) + 1
            return
        p, tunnel, key = cast(Carried, c)
        src, sport, dst, dport, seq, ack, flags, payload, missing = p
        entry = self.flows.get((src, sport, dst, dport))
        if self.duplicates.seen(ts, key):
            stats.duplicate_packets += 1
            if entry is not None:
                entry[0].duplicate(tunnel)
            return
        if entry is None or (entry[0].closed and flags & SYN and not flags & ACK):
            entry = self._new_connection(ts, src, sport, dst, dport, flags)
        elif entry[0].closed:
            return
        conn = entry[0]
        if tunnel and tunnel not in conn.tunnels:
            conn.seen_in(tunnel)
        conn.packet(entry[1], ts, seq, ack, flags, payload, missing)
        if ts - self._swept > FORGET_CLOSED_US:
            self._sweep(ts)

    def _new_connection(
        self, ts: int, src: bytes, sport: int, dst: bytes, dport: int, flags: int
    ) -> tuple[Connection, int]:
        a, b = (src, sport), (dst, dport)
        if self.is_broker(b):
            client, broker, known = a, b, True
        elif self.is_broker(a):
            client, broker, known = b, a, True
        elif flags & SYN:
            # The SYN's sender is the client; SYN+ACK comes from the server.
            client, broker = (b, a) if flags & ACK else (a, b)
            known = True
        else:
            client, broker, known = a, b, False
        flows = self.flows
        if len(flows) >= self._max_entries:
            self._evict_oldest(ts)
        self._flows_cell[0] = len(flows) // 2 * CONNECTION_COST + CONNECTION_COST
        self._next_id += 1
        index, workers = self.options.conn_ids
        number = self.options.conn_id_base + (self._next_id - 1) * workers + index + 1
        conn = Connection(self, number, client, broker, known, ts)
        self.flows[client + broker] = (conn, C2B)  # type: ignore[index]
        self.flows[broker + client] = (conn, B2C)  # type: ignore[index]
        return self.flows[(src, sport, dst, dport)]

    def exchange_rows(self, conn: Connection) -> ExchangeRows:
        return self.rows.handler_for(conn)

    def swap_directions(self, conn: Connection) -> None:
        self.flows[conn.client + conn.broker] = (conn, C2B)  # type: ignore[index]
        self.flows[conn.broker + conn.client] = (conn, B2C)  # type: ignore[index]

    def closed(self, conn: Connection) -> None:
        if conn.kafka:
            self.stats.kafka_connections += 1
        else:
            self.stats.non_kafka_connections += 1
        row = conn.row()
        if accounting_difference(row, "to_broker") or accounting_difference(row, "to_client"):
            self.stats.accounting_mismatches += 1
        self.stats.uncaptured_bytes += conn.uncaptured_bytes()
        if conn.on_broker_port:
            self.stats.not_kafka_on_broker_ports += 1
        self.rows.connection_closed(conn.conn_id, row)
        self._closed[conn.conn_id] = conn

    def _sweep(self, now: int, forget_us: int = FORGET_CLOSED_US) -> None:
        self._swept = now
        keep = {}
        for conn_id, conn in self._closed.items():
            if now - conn.ts_last > forget_us:
                self._forget(conn)
            else:
                keep[conn_id] = conn
        self._closed = keep
        idle_us = self.options.idle_timeout_us
        if idle_us and forget_us == FORGET_CLOSED_US:
            self.expire_idle(now, idle_us)

    def _forget(self, conn: Connection) -> None:
        """Drop a connection's flow-table entries (a later packet starts a new connection)."""
        flows = self.flows
        for key in (conn.client + conn.broker, conn.broker + conn.client):
            if flows.get(key, (None,))[0] is conn:  # type: ignore[index]
                del flows[key]  # type: ignore[arg-type]
        self._flows_cell[0] = len(flows) // 2 * CONNECTION_COST

    def _open(self) -> list[Connection]:
        seen: dict[int, Connection] = {}
        for conn, _ in self.flows.values():
            if not conn.closed:
                seen[conn.conn_id] = conn
        return list(seen.values())

    def _evict(self, conn: Connection, reason: str) -> None:
        held = conn.held_bytes()
        conn.expired = reason
        conn.close(conn.ts_last)
        self._forget(conn)
        self._closed.pop(conn.conn_id, None)
        if reason == EVICTED:
            self.stats.evicted_connections += 1
            self.stats.evicted_bytes += held
        else:
            self.stats.idle_connections += 1

    def _evict_oldest(self, now: int) -> None:
        """The flow table is full: forget closed connections first (they only absorb late
        retransmissions), then evict the open connections that were quiet the longest."""
        before = len(self._closed)
        self._sweep(now, forget_us=-1)
        self.stats.forgotten_early += before - len(self._closed)
        target = int(self._max_entries * EVICT_TO)
        if len(self.flows) < target:
            return
        conns = sorted(self._open(), key=lambda c: c.ts_last)
        for conn in conns[: (len(self.flows) - target) // 2 + 1]:
            self._evict(conn, EVICTED)

    def _evict_largest(self, now: int) -> None:
        """Reassembly holds more than its share: evict the connections holding the most first."""
        target = int(self._held_cap * EVICT_TO)
        by_size = sorted(((c.held_bytes(), c.conn_id, c) for c in self._open()), reverse=True)
        for _, _, conn in by_size:
            if self.held[0] <= target:
                break
            self._evict(conn, EVICTED)
        self.budget.pressure = False
        # Never a scan per packet: if nothing left could be evicted, wait for an eighth more.
        self._held_trigger = max(self._held_cap, self.held[0] + self._held_cap // 8)

    def open_connections(self) -> int:
        """Connections being followed now: opened and not yet closed."""
        st = self.stats
        return self._next_id - st.kafka_connections - st.non_kafka_connections

    def expire_idle(self, now: int, idle_us: int) -> int:
        """Close the connections that saw no packet for ``idle_us`` (a long-running capture would
        otherwise hold them, and their rows, forever). Their flow entries are dropped at once, so a
        packet that comes later starts a new, mid-stream connection. Returns how many were closed."""
        expired = [conn for conn in self._open() if now - conn.ts_last > idle_us]
        for conn in expired:
            self._evict(conn, IDLE)
        return len(expired)

    def finish(self) -> SessionStats:
        """End of capture: close every open connection (pending requests become unanswered)."""
        seen: set[int] = set()
        for conn, _ in list(self.flows.values()):
            if conn.conn_id not in seen:
                seen.add(conn.conn_id)
                conn.close(conn.ts_last)
        self.decap.defrag.finish()
        self.rows.finish(self)
        st, decap = self.stats, self.decap.totals()
        st.decapsulated, st.tunnel_overhead_bytes = dict(decap.decapsulated), decap.overhead_bytes
        st.fragments = self.decap.defrag.stats.as_dict()
        if self.keys is not None:
            st.secrets_evicted, st.secrets_evicted_bytes = self.keys.take_evicted()
            self.keys.bound(None, self.keys.cap or self.budget.cap(SECRETS))  # the key log outlives us
        directory = self.rows.node_ids.directory
        st.brokers_evicted, st.brokers_evicted_bytes = directory.take_evicted()
        st.broker_conflicts, st.broker_disputes = directory.take_conflicts()
        directory.bound(None, self.budget.cap(BROKERS))
        return st


# The pure-Python packet path: what the compiled one falls back to.
_PURE_PACKET = Session.packet


def compiled() -> bool:
    """Whether sessions use the compiled packet path (kwsniff.pipeline._fastpath)."""
    return FastPath is not None
