"""One decode task of the fleet pipeline: a capture file, or one flow bucket of it, to Arrow chunks.

Runs inside Spark's Python workers but imports nothing of Spark: the task is the same core
(:class:`kwsniff.session.Session`) that `kwsniff read` runs, with a sink that turns rows into
Arrow IPC chunks, one chunk per table per ``CHUNK_ROWS`` rows, so the JVM moves Arrow bytes and
never a Python row.

Flow buckets: every task of a bucketed capture reads the whole file but feeds the Session only the
packets whose canonical 4-tuple (the two endpoints, sorted) hashes to its bucket, so both directions
of a connection, and every connection reusing that 4-tuple, land in one task. Packets that are not
TCP go to bucket 0 (they make no rows). In bucketed mode ``conn_id`` is the capture-wide index of
the packet that opened the connection: the driver ranks those indexes per capture, which gives back
exactly the numbering of the unsplit decode (a connection is numbered when its first packet is fed).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, cast

import pyarrow as pa

from kwsniff.net import TcpPacket, parse_tcp
from kwsniff.session import Session, SessionOptions
from kwsniff.tables import SCHEMAS

CHUNK_ROWS = 10_000
ERROR_TABLE = "_error"  # chunks of this name hold the message of an input that could not be read
# What a task yields: one Arrow IPC stream (one record batch of one table) per row.
CHUNK_SCHEMA = pa.schema(
    [
        ("table", pa.string()),
        ("capture", pa.string()),
        ("date", pa.string()),
        ("rows", pa.int64()),
        ("data", pa.binary()),
    ]
)


def flow_bucket(linktype: int, data: bytes, buckets: int) -> int:
    """The bucket of a packet: crc32 of its sorted endpoints (stable across processes, unlike hash())."""
    p = parse_tcp(linktype, data)
    if type(p) is str:
        return 0
    src, sport, dst, dport = cast(TcpPacket, p)[:4]
    (ip_a, port_a), (ip_b, port_b) = sorted(((src, sport), (dst, dport)))
    key = ip_a + port_a.to_bytes(2, "big") + ip_b + port_b.to_bytes(2, "big")
    return zlib.crc32(key) % buckets


def capture_date(ts_us: int) -> str:
    """The `date=` partition of a capture: the UTC day of its first packet."""
    return datetime.fromtimestamp(ts_us / 1e6, UTC).date().isoformat()


def to_ipc(batch: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue())


def from_ipc(data: bytes) -> pa.RecordBatch:
    return pa.ipc.open_stream(data).read_next_batch()


class ChunkSink:
    """Rows of ``tables`` held per table and turned into IPC chunks every ``CHUNK_ROWS`` rows."""

    def __init__(self, tables: tuple[str, ...], conn_ids: dict[int, int] | None = None) -> None:
        self.rows: dict[str, list[dict[str, Any]]] = {t: [] for t in tables}
        self.ready: list[tuple[str, int, bytes]] = []
        self.conn_ids = conn_ids  # bucketed mode: local conn_id -> index of its first packet

    def add(self, table: str, row: dict[str, Any]) -> None:
        rows = self.rows.get(table)
        if rows is None:
            return
        rows.append(row)
        if len(rows) >= CHUNK_ROWS:
            self.flush(table)

    def flush(self, table: str) -> None:
        rows = self.rows[table]
        if not rows:
            return
        if self.conn_ids is not None:
            ids = self.conn_ids
            for row in rows:
                row["conn_id"] = ids[row["conn_id"]]
        batch = pa.RecordBatch.from_pylist(rows, schema=SCHEMAS[table])
        self.ready.append((table, batch.num_rows, to_ipc(batch)))
        rows.clear()

    def take(self) -> list[tuple[str, int, bytes]]:
        ready, self.ready = self.ready, []
        return ready


class BucketSession(Session):
    """A Session that remembers, per connection, the capture-wide index of the packet opening it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.packet_index = 0
        self.first_packet: dict[int, int] = {}

    def _new_connection(self, ts: int, src: bytes, sport: int, dst: bytes, dport: int, flags: int) -> Any:
        entry = super()._new_connection(ts, src, sport, dst, dport, flags)
        self.first_packet[self._next_id] = self.packet_index
        return entry


def decode_chunks(
    path: str,
    bucket: int,
    buckets: int,
    options: SessionOptions,
    tables: tuple[str, ...],
    name: str | None = None,
) -> Iterator[tuple[str, str, str, int, bytes]]:
    """(table, capture, date, rows, IPC chunk) of one task. ``buckets`` 1 decodes the whole capture.

    A file that is not a readable capture yields one ``ERROR_TABLE`` chunk holding the one-line
    message (UTF-8), for the driver to report like `kwsniff read` does, instead of failing the job.
    ``name`` is the tables' `capture` value (default: the file's name)."""
    from kwsniff.capture import CaptureError, open_capture

    try:
        reader = open_capture(path)
    except (CaptureError, OSError) as exc:
        message = str(exc) if isinstance(exc, CaptureError) else f"{path}: {exc.strerror or exc}"
        if bucket == 0:
            yield ERROR_TABLE, path, "", 0, message.encode()
        return

    bucketed = buckets > 1
    sink = ChunkSink(tables)
    with reader:
        name = name or reader.name
        session = BucketSession(name, sink, options) if bucketed else Session(name, sink, options)
        if isinstance(session, BucketSession):
            sink.conn_ids = session.first_packet
        date = ""
        for n, (ts, linktype, data) in enumerate(reader.packets()):
            if not date:
                date = capture_date(ts)
            if bucketed:
                if flow_bucket(linktype, data, buckets) != bucket:
                    continue
                session.packet_index = n  # type: ignore[attr-defined]
            session.packet(ts, linktype, data)
            if sink.ready:
                for table, rows, chunk in sink.take():
                    yield table, name, date, rows, chunk
        session.finish()
    for table in tables:
        sink.flush(table)
    for table, rows, chunk in sink.take():
        yield table, name, date, rows, chunk
