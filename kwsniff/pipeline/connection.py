"""One TCP connection: two reassemblers, what the connection speaks (Kafka, SASL, TLS, something
else), then a Conversation, and the `connections` row. No I/O."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from kwsniff.kafka import Conversation, plausible_request
from kwsniff.kafka.opening import kafka_evidence
from kwsniff.kafka.sasl import looks_like_gssapi_token
from kwsniff.kafka.tls import TlsHellos, guess_protocol, looks_like_tls, looks_like_tls_record
from kwsniff.net import ACK, FIN, NO_FRAMES, RST, SYN, format_ip
from kwsniff.rows import DIRECTIONS, ExchangeRows
from kwsniff.tcp import TcpReassembler
from kwsniff.tcp.reassembly import SNAPLEN

if TYPE_CHECKING:
    from kwsniff.tls import KeyLog, TlsStream

C2B = 0  # client to broker
B2C = 1  # broker to client
# `connections.expired`: why kwsniff stopped following a connection before it ended.
IDLE = "idle"  # no packet for the idle timeout, by capture time
EVICTED = "memory"  # evicted to keep the run under --memory-limit (docs/memory.md)

# Bytes buffered per direction while deciding whether a connection speaks Kafka at all.
DETECT_BYTES = 64 * 1024
# Client bytes needed to judge a connection's opening: a size prefix and a request header v1 up to
# the client id length. The smallest complete request (header v0, empty body) is 12 bytes.
OPENING_BYTES = 14
SMALLEST_REQUEST = 12
# A connection seen through more tunnels than this (mirror sessions, VNIs) lists only the first ones.
MAX_TUNNELS = 8
# The accounting invariant (docs/accounting.md), per direction: every byte the wire carried, by
# TCP sequence numbers, is in exactly one of these columns once the connection is closed.
# A TLS connection's bytes are record overhead (headers, tags, handshake), encrypted bytes left
# undecrypted, or plaintext, which is framed like any Kafka stream (README "TLS").
ACCOUNTED = (
    "frame_bytes",
    "gap_bytes",
    "skipped_bytes",
    "sasl_bytes",
    "tls_overhead_bytes",
    "encrypted_bytes",
    "not_kafka_bytes",
)


class ConnectionOptions(Protocol):
    """The settings a connection reads (kwsniff.pipeline.session.SessionOptions has them all)."""

    @property
    def broker_ports(self) -> frozenset[int]: ...
    @property
    def auto_detect(self) -> bool: ...
    @property
    def max_frame_size(self) -> int: ...
    @property
    def max_ooo_bytes(self) -> int: ...


class ConnectionOwner(Protocol):
    """What a connection needs from whoever holds the capture's connections (the Session): which
    endpoints are brokers, a rows handler, and to be told when it turns around or ends. Defined
    here, so that the dependency runs one way: session.py imports connection.py, never back."""

    @property
    def options(self) -> ConnectionOptions: ...
    @property
    def keys(self) -> KeyLog | None: ...
    @property
    def held(self) -> list[int]:
        """The run's reassembly memory pool (kwsniff.memory.MemoryBudget.cell)."""
        ...

    def is_broker(self, endpoint: tuple[bytes, int]) -> bool: ...
    def learn_broker(self, endpoint: tuple[bytes, int]) -> None: ...
    def forget_broker(self, endpoint: tuple[bytes, int]) -> None: ...
    def exchange_rows(self, conn: Connection) -> ExchangeRows: ...
    def swap_directions(self, conn: Connection) -> None: ...
    def closed(self, conn: Connection) -> None: ...


class Connection:
    """One TCP connection: two reassemblers, Kafka detection, then a Conversation."""

    __slots__ = (
        "owner",
        "conn_id",
        "client",
        "broker",
        "rs",
        "conv",
        "rows",
        "kafka",
        "role_known",
        "syn_seen",
        "prebuf",
        "prebuf_len",
        "packets",
        "wire_bytes",
        "not_kafka_bytes",
        "lost_bytes",
        "prebuf_gap",
        "prebuf_uncaptured",
        "tls",
        "tls_stream",
        "protocol_guess",
        "on_broker_port",
        "ts_first",
        "ts_last",
        "fin",
        "rst",
        "closer",
        "closed",
        "synced",
        "tunnels",
        "duplicate_packets",
        "recent",
        "expired",
    )

    def __init__(
        self,
        owner: ConnectionOwner,
        conn_id: int,
        client: tuple[bytes, int],
        broker: tuple[bytes, int],
        role_known: bool,
        ts: int,
    ) -> None:
        self.owner = owner
        self.conn_id = conn_id
        self.client = client
        self.broker = broker
        self.role_known = role_known
        self.kafka: bool | None = None
        self.syn_seen = False
        self.conv: Conversation | None = None
        self.rows: ExchangeRows | None = None
        self.prebuf: tuple[list[tuple[int, bytes]], list[tuple[int, bytes]]] = ([], [])
        self.prebuf_len = [0, 0]
        self.packets = [0, 0]
        self.wire_bytes = [0, 0]
        self.not_kafka_bytes = [0, 0]
        self.lost_bytes = [0, 0]  # gap bytes the capture never saw (not cut by snaplen)
        self.prebuf_gap = False
        # Per direction, the gap markers in prebuf that were snap-length cuts: index -> bytes not kept.
        self.prebuf_uncaptured: tuple[dict[int, int], dict[int, int]] = ({}, {})
        self.tls: TlsHellos | None = None
        self.tls_stream: TlsStream | None = None
        self.protocol_guess: str | None = None
        self.on_broker_port = False
        self.ts_first = ts
        self.ts_last = ts
        self.fin = [False, False]
        self.rst = False
        self.closer: int | None = None  # the direction whose FIN or RST came first
        self.closed = False
        self.synced = (False, False)
        self.tunnels: list[str] = []  # where the connection was seen, e.g. "vxlan:vni=42"
        self.duplicate_packets = 0
        # Per direction, the header bytes of the last few plain frames (kwsniff.net.duplicates).
        self.recent: list[tuple[bytes, ...]] = [NO_FRAMES, NO_FRAMES]
        # Why kwsniff stopped following the connection before it ended: IDLE or EVICTED.
        self.expired: str | None = None
        cap = owner.options.max_ooo_bytes
        held = owner.held
        self.rs = (
            TcpReassembler(self._c2b_data, self._c2b_gap, max_ooo_bytes=cap, held=held),
            TcpReassembler(self._b2c_data, self._b2c_gap, max_ooo_bytes=cap, held=held),
        )

    # -- per packet ----------------------------------------------------------------------------------
    def packet(
        self, d: int, ts: int, seq: int, ack: int, flags: int, payload: memoryview, missing: int
    ) -> None:
        self.ts_last = ts
        self.packets[d] += 1
        rs = self.rs[d]
        if flags & SYN:
            rs.syn(seq, ts)
            self.syn_seen = True
            seq = (seq + 1) & 0xFFFFFFFF
        if flags & ACK:
            # First what this packet says about the other direction: an ACK past a hole there means
            # the capture lost those bytes, and the data behind the hole must be delivered before
            # this packet's payload (it may be the response to a request held behind the hole).
            self.rs[1 - d].peer_ack(ts, ack)
        if payload or missing:
            self.wire_bytes[d] += len(payload) + missing
            rs.segment(ts, seq, payload, missing)
        if flags & FIN:
            rs.fin(ts, (seq + len(payload) + missing) & 0xFFFFFFFF)
            self.fin[d] = True
            if self.closer is None:
                self.closer = d
            if self.fin[1 - d]:
                self.close(ts)
        if flags & RST:
            self.rst = True
            if self.closer is None:
                self.closer = d
            self.close(ts)

    def seen_in(self, tunnel: str) -> None:
        if tunnel not in self.tunnels and len(self.tunnels) < MAX_TUNNELS:
            self.tunnels.append(tunnel)

    def duplicate(self, tunnel: str) -> None:
        """A copy of a packet this connection already had: counted, and its tunnel noted, nothing else."""
        self.duplicate_packets += 1
        if tunnel:
            self.seen_in(tunnel)

    # -- reassembled data ----------------------------------------------------------------------------
    def _c2b_data(self, ts: int, chunk: memoryview | bytes) -> None:
        self._data(C2B, ts, chunk)

    def _b2c_data(self, ts: int, chunk: memoryview | bytes) -> None:
        self._data(B2C, ts, chunk)

    def _c2b_gap(self, ts: int, nbytes: int, reason: str) -> None:
        if reason != SNAPLEN:
            self.lost_bytes[C2B] += nbytes
        self._gap(C2B, ts, nbytes, reason == SNAPLEN)

    def _b2c_gap(self, ts: int, nbytes: int, reason: str) -> None:
        if reason != SNAPLEN:
            self.lost_bytes[B2C] += nbytes
        self._gap(B2C, ts, nbytes, reason == SNAPLEN)

    def uncaptured_bytes(self) -> int:
        """Bytes the stream carried that the capture's snap length did not keep (both directions)."""
        return sum(self.rs[d].gap_bytes - self.lost_bytes[d] for d in (C2B, B2C))

    def _data(self, d: int, ts: int, chunk: memoryview | bytes) -> None:
        stream = self.tls_stream
        if stream is not None:
            hellos = self.tls
            if hellos is not None and hellos.pending:
                hellos.feed(d, chunk)
            if hellos is None or not hellos.pending:
                # Both hellos read: from now on the reassemblers feed the TLS stream straight.
                self.rs[C2B].on_data, self.rs[B2C].on_data = stream.feeders
            stream.feed(d, ts, chunk)
        else:
            self._plain(d, ts, chunk)

    def _tls_plain(self, d: int, ts: int, chunk: bytes | memoryview) -> None:
        if self.conv is None and self.kafka is not None and not self.prebuf_len[C2B] + self.prebuf_len[B2C]:
            # The first plaintext of a TLS connection: judge it as the start of any stream.
            self.kafka = None
        self._plain(d, ts, chunk)

    def _tls_gap(self, d: int, ts: int) -> None:
        self._plain_gap(d, ts, 0)

    def _plain(self, d: int, ts: int, chunk: memoryview | bytes) -> None:
        conv = self.conv
        if conv is not None:
            (conv.client if d == C2B else conv.broker).data(ts, chunk)
        elif self.kafka is False:
            self.not_kafka_bytes[d] += len(chunk)
        else:
            self.prebuf[d].append((ts, bytes(chunk)))
            self.prebuf_len[d] += len(chunk)
            self.owner.held[0] += len(chunk)
            self._detect()

    def _gap(self, d: int, ts: int, nbytes: int, uncaptured: bool = False) -> None:
        stream = self.tls_stream
        if stream is not None:
            stream.gap(d, ts, nbytes)  # its plaintext side calls _tls_gap
        else:
            self._plain_gap(d, ts, nbytes, uncaptured)

    def _plain_gap(self, d: int, ts: int, nbytes: int, uncaptured: bool = False) -> None:
        conv = self.conv
        if conv is not None:
            splitter = conv.client if d == C2B else conv.broker
            if uncaptured:
                # The wire carried these bytes (a snap length cut the packet): frames keep their
                # boundaries across them.
                splitter.uncaptured(ts, nbytes)
            else:
                splitter.gap(ts, nbytes)
        elif self.kafka is None:
            # A hole before we know what the stream is: what we buffered can no longer be trusted
            # to start on a frame boundary, so detection restarts in resync mode.
            self.synced = (False, False)
            self.prebuf_gap = True
            if uncaptured:
                self.prebuf_uncaptured[d][len(self.prebuf[d])] = nbytes
            self.prebuf[d].append((ts, b""))

    # -- is this Kafka, and which side is the client? -------------------------------------------------
    def _detect(self, final: bool = False) -> None:
        owner = self.owner
        if owner.is_broker(self.broker):
            if not self.syn_seen or self.prebuf_gap:
                # The stream's first bytes are not in the capture: its opening cannot be judged,
                # so the broker port is trusted and the splitter resynchronises; TLS records there
                # are a TLS connection whose handshake the capture missed.
                if any(chunks and looks_like_tls_record(chunks[0][1]) for chunks in self.prebuf):
                    self._start_tls(True)
                else:
                    self._start_kafka()
            else:
                self._judge_opening(final)
        elif not owner.options.auto_detect:
            self._not_kafka()
        elif self.role_known:
            self._prove_opening(final)
        else:
            self._prove_mid_stream(final)

    def _prebuf_bytes(self, d: int) -> tuple[bytes, bool]:
        """What one direction buffered up to the first gap (bytes after it start anywhere), and
        whether there was a gap."""
        chunks = self.prebuf[d]
        for i, (_, chunk) in enumerate(chunks):
            if not chunk:
                return b"".join(c for _, c in chunks[:i]), True
        return b"".join(c for _, c in chunks), False

    def _evidence(self, requests: int, final: bool, opening: bool) -> bool | None:
        """kafka_evidence with direction ``requests`` as the client's."""
        req, req_cut = self._prebuf_bytes(requests)
        resp, resp_cut = self._prebuf_bytes(1 - requests)
        return kafka_evidence(
            req,
            resp,
            max_frame_size=self.owner.options.max_frame_size,
            window=DETECT_BYTES,
            final=final,
            opening=opening,
            requests_cut=req_cut,
            responses_cut=resp_cut,
        )

    def _window_full(self) -> bool:
        return self.prebuf_len[C2B] >= DETECT_BYTES or self.prebuf_len[B2C] >= DETECT_BYTES

    def _prove_opening(self, final: bool) -> None:
        """A port nobody named, the connection's start in the capture: Kafka only on proof."""
        if looks_like_tls(self._prebuf_bytes(C2B)[0]):
            self._start_tls(False)
            return
        verdict = self._evidence(C2B, final, opening=True)
        if verdict:
            self._start_kafka(proven=True)
        elif verdict is False or final or self._window_full():
            self._not_kafka()

    def _prove_mid_stream(self, final: bool) -> None:
        """A port nobody named, caught mid-connection: the client is the side whose bytes are
        request frames answered (correlation id, decodable response) at the start of the other
        side's frames. (A response alone can look like a request: correlation id 9 reads as api key
        0 version 9.)"""
        verdicts = []
        for d in (C2B, B2C):
            verdict = self._evidence(d, final, opening=False)
            if verdict:
                if d == B2C:
                    self._swap_roles()
                self.synced = (False, False)
                self._start_kafka(proven=True)
                return
            verdicts.append(verdict)
        if verdicts == [False, False] or final or self._window_full():
            self._not_kafka()

    def _judge_opening(self, final: bool) -> None:
        """On a broker port: Kafka, SASL, TLS or something else, from the client's first bytes."""
        c2b = b"".join(c for _, c in self.prebuf[C2B])
        n = len(c2b)
        if looks_like_tls(c2b):
            self._start_tls(True)
        elif n >= OPENING_BYTES or (final and n >= SMALLEST_REQUEST):
            if plausible_request(memoryview(c2b)):
                self._start_kafka()
            elif looks_like_gssapi_token(c2b):
                # Kafka 0.9 clients opened with a GSSAPI token, no SaslHandshake (protocol guide,
                # "SASL Authentication Sequence", interoperability with 0.9).
                self._start_kafka(sasl_mechanism="GSSAPI")
            else:
                self._not_kafka()
        elif final or (n >= 4 and not self._plausible_size(c2b)):
            self._not_kafka()
        elif self.prebuf_len[B2C] and n < SMALLEST_REQUEST:
            # A broker never speaks before it has a whole request: the server spoke first (SSH,
            # SMTP, a database banner...).
            self._not_kafka()
        elif self.prebuf_len[B2C] >= DETECT_BYTES:
            self._not_kafka()

    def _plausible_size(self, c2b: bytes) -> bool:
        size = int.from_bytes(c2b[0:4], "big", signed=True)
        return 1 <= size <= self.owner.options.max_frame_size

    def _swap_roles(self) -> None:
        self.client, self.broker = self.broker, self.client
        self.rs = (self.rs[1], self.rs[0])
        self.rs[C2B].on_data, self.rs[B2C].on_data = self._c2b_data, self._b2c_data
        self.rs[C2B].on_gap, self.rs[B2C].on_gap = self._c2b_gap, self._b2c_gap
        self.prebuf = (self.prebuf[1], self.prebuf[0])
        self.prebuf_uncaptured = (self.prebuf_uncaptured[1], self.prebuf_uncaptured[0])
        self.prebuf_len.reverse()
        self.packets.reverse()
        self.wire_bytes.reverse()
        self.lost_bytes.reverse()
        self.fin.reverse()
        if self.closer is not None:
            self.closer = 1 - self.closer
        self.owner.swap_directions(self)

    def _start_kafka(self, sasl_mechanism: str | None = None, proven: bool = False) -> None:
        owner = self.owner
        self.kafka = True
        if proven:
            owner.learn_broker(self.broker)
        synced = (
            (self.syn_seen, self.syn_seen) if self.synced == (False, False) and self.syn_seen else self.synced
        )
        self.rows = owner.exchange_rows(self)
        conv = Conversation(
            self.rows, max_frame_size=owner.options.max_frame_size, synced=synced, held=owner.held
        )
        self.conv = conv
        if sasl_mechanism is not None:
            conv.start_sasl_tokens(sasl_mechanism)
        for d, splitter in ((C2B, conv.client), (B2C, conv.broker)):
            uncaptured = self.prebuf_uncaptured[d]
            for i, (ts, chunk) in enumerate(self.prebuf[d]):
                if chunk:
                    splitter.data(ts, chunk)
                elif i in uncaptured:
                    splitter.uncaptured(ts, uncaptured[i])
                else:
                    splitter.gap(ts, 0)
        self._drop_prebuf()
        if self.tls_stream is None:
            # From now on _data and _plain only pass plain bytes on to the splitter: let the
            # reassemblers call it straight (three Python calls fewer per packet).
            self.rs[C2B].on_data, self.rs[B2C].on_data = conv.client.data, conv.broker.data
        else:
            # Likewise _tls_plain and _plain between the TLS stream and the splitters.
            self.tls_stream.sinks = (conv.client.data, conv.broker.data)

    def _start_tls(self, on_broker_port: bool) -> None:
        # Kafka over TLS on a broker port is still a Kafka connection, readable when the key log has
        # its secrets; its plaintext is judged like any stream's start.
        self.kafka = on_broker_port
        self.protocol_guess = "tls"
        from kwsniff.tls import TlsStream  # and cryptography: only once a run meets TLS

        tls = self.tls = TlsHellos()
        stream = self.tls_stream = TlsStream(
            self.owner.keys,
            self._tls_plain,
            self._tls_gap,
            handshake_seen=self.syn_seen and not self.prebuf_gap,
        )
        prebuf, self.prebuf, self.prebuf_len = self.prebuf, ([], []), [0, 0]
        self.owner.held[0] -= sum(len(c) for chunks in prebuf for _, c in chunks)  # out of the pool
        for d in (C2B, B2C):
            for ts, chunk in prebuf[d]:
                if chunk:
                    tls.feed(d, chunk)
                    stream.feed(d, ts, chunk)
                else:
                    stream.gap(d, ts, 0)

    def _not_kafka(self) -> None:
        self.kafka = False
        self.on_broker_port = self.broker[1] in self.owner.options.broker_ports
        if self.syn_seen and not self.on_broker_port:
            self.owner.forget_broker(self.broker)
        if self.tls_stream is None:
            self.protocol_guess = guess_protocol(
                b"".join(c for _, c in self.prebuf[C2B])[:16], b"".join(c for _, c in self.prebuf[B2C])[:16]
            )
        for d in (C2B, B2C):
            self.not_kafka_bytes[d] += self.prebuf_len[d]
        self._drop_prebuf()

    def _review_evidence(self) -> None:
        """A server proved Kafka by one exchange, but most of what its connections then carried did
        not decode: the proof was a coincidence. Its endpoint is no longer trusted (rows already
        written stay, with their decode errors)."""
        conv, rows = self.conv, self.rows
        if conv is None or rows is None or self.broker[1] in self.owner.options.broker_ports:
            return
        failed = rows.decode_errors + rows.undecodable_frames
        if failed and 2 * failed > conv.requests:
            self.owner.forget_broker(self.broker)

    # -- end -----------------------------------------------------------------------------------------
    def row(self) -> dict:
        """The `connections` row: what this connection carried, and what could not be decoded."""
        conv, rows = self.conv, self.rows
        c_ip, c_port = format_endpoint(self.client)
        b_ip, b_port = format_endpoint(self.broker)
        rc, rb = self.rs
        sasl = conv.sasl if conv is not None else None
        sasl_tokens = sasl.token_count if sasl is not None else [0, 0]
        sasl_bytes = sasl.token_bytes if sasl is not None else [0, 0]
        row = {
            "client_ip": c_ip,
            "client_port": c_port,
            "broker_ip": b_ip,
            "broker_port": b_port,
            "ts_first": self.ts_first,
            "ts_last": self.ts_last,
            "kafka": bool(self.kafka),
            "syn_seen": self.syn_seen,
            "fin_seen": self.fin[C2B] or self.fin[B2C],
            "rst_seen": self.rst,
            "packets_to_broker": self.packets[C2B],
            "packets_to_client": self.packets[B2C],
            "bytes_to_broker": self.wire_bytes[C2B],
            "bytes_to_client": self.wire_bytes[B2C],
            "duplicate_bytes": rc.bytes_duplicate + rb.bytes_duplicate,
            "gaps": rc.gaps + rb.gaps,
            "gap_bytes": rc.gap_bytes + rb.gap_bytes,
            "implausible_gaps": rc.implausible_gaps + rb.implausible_gaps,
            "ooo_overflows": rc.ooo_overflows + rb.ooo_overflows,
            "not_kafka_bytes": self.not_kafka_bytes[C2B] + self.not_kafka_bytes[B2C],
            "frames_to_broker": conv.client.frames - sasl_tokens[C2B] if conv else 0,
            "frames_to_client": conv.broker.frames - sasl_tokens[B2C] if conv else 0,
            "frame_bytes_to_broker": conv.client.frame_bytes - sasl_bytes[C2B] if conv else 0,
            "frame_bytes_to_client": conv.broker.frame_bytes - sasl_bytes[B2C] if conv else 0,
            "skipped_bytes": (conv.client.skipped_bytes + conv.broker.skipped_bytes) if conv else 0,
            "resyncs": (conv.client.resyncs + conv.broker.resyncs) if conv else 0,
            "requests": conv.requests if conv else 0,
            "responses": conv.responses if conv else 0,
            "orphan_responses": conv.orphans if conv else 0,
            "protocol_guess": self.protocol_guess,
            "tls": self.tls is not None,
            "tls_version": self.tls.version if self.tls else None,
            "tls_sni": self.tls.sni if self.tls else None,
            "tls_state": self.tls_stream.state if self.tls_stream else None,
            "tls_cipher": self.tls_stream.cipher if self.tls_stream else None,
            "tls_failed_records": sum(s.failed for s in self.tls_stream.dirs) if self.tls_stream else 0,
            "sasl_mechanism": sasl.mechanism if sasl else None,
            "sasl_outcome": sasl.outcome if sasl else None,
            "sasl_tokens": sasl.tokens if sasl else 0,
            "sasl_authenticated": sasl.authenticated if sasl else False,
            "sasl_principal": sasl.principal if sasl else None,
            "tunnel": ",".join(self.tunnels) or None,
            "duplicate_packets": self.duplicate_packets,
            "expired": self.expired,
        }
        for d, name in enumerate(DIRECTIONS):
            # By TCP sequence numbers: bytes seen once, plus those the capture lost.
            row["stream_bytes_" + name] = self.wire_bytes[d] - self.rs[d].bytes_duplicate + self.lost_bytes[d]
            row["gap_bytes_" + name] = self.rs[d].gap_bytes
            row["skipped_bytes_" + name] = (
                (conv.client if d == C2B else conv.broker).skipped_bytes if conv else 0
            )
            row["sasl_bytes_" + name] = sasl_bytes[d]
            tls_side = self.tls_stream.dirs[d] if self.tls_stream is not None else None
            row["tls_overhead_bytes_" + name] = tls_side.overhead if tls_side else 0
            row["encrypted_bytes_" + name] = tls_side.undecryptable if tls_side else 0
            row["decrypted_bytes_" + name] = tls_side.decrypted if tls_side else 0
            row["not_kafka_bytes_" + name] = self.not_kafka_bytes[d]
        if rows is not None:
            row.update(rows.connection_fields())
        return row

    def close(self, ts: int) -> None:
        if self.closed:
            return
        self.closed = True
        for rs in self.rs:
            rs.flush(ts)
        if self.tls_stream is not None:
            self.tls_stream.finish()
        if self.kafka is None and (self.prebuf_len[C2B] or self.prebuf_len[B2C]):
            self._detect(final=True)
        if self.conv is not None:
            if self.closer == B2C:
                self.conv.sasl.broker_closed()
            self.conv.close(ts)
            self._review_evidence()
        self.owner.closed(self)
        # Only the flow-table entry stays (to absorb late retransmissions) until swept. Break the
        # reference cycles (callbacks bound to this connection) so memory is freed without waiting
        # for the cycle collector.
        for rs in self.rs:
            rs.on_data = _ignore_data
            rs.on_gap = _ignore_gap
        self.conv = None
        self.rows = None
        self._drop_prebuf()

    def _drop_prebuf(self) -> None:
        """Let go of the bytes held while detecting, releasing them from the memory pool."""
        self.owner.held[0] -= sum(len(c) for chunks in self.prebuf for _, c in chunks)
        self.prebuf = ([], [])
        self.prebuf_uncaptured = ({}, {})

    def held_bytes(self) -> int:
        """Bytes this connection holds for reassembly now: out of order, partial frames, detection."""
        held = self.rs[0].buffered_bytes + self.rs[1].buffered_bytes
        held += sum(len(c) for chunks in self.prebuf for _, c in chunks)
        if self.conv is not None:
            held += self.conv.client.buffered + self.conv.broker.buffered
        return held


def _ignore_data(ts: int, chunk: memoryview | bytes) -> None:
    pass


def _ignore_gap(ts: int, nbytes: int, reason: str) -> None:
    pass


def accounting_difference(row: dict, direction: str) -> int:
    """Stream bytes minus the bytes accounted for, in one direction of a `connections` row.

    Zero on every closed connection: ``stream_bytes = frame_bytes + gap_bytes + skipped_bytes +
    sasl_bytes + tls_overhead_bytes + encrypted_bytes + not_kafka_bytes`` (docs/accounting.md).
    """
    return row["stream_bytes_" + direction] - sum(row[k + "_" + direction] for k in ACCOUNTED)


def format_endpoint(endpoint: tuple[bytes, int]) -> tuple[str, int]:
    return format_ip(endpoint[0]), endpoint[1]
