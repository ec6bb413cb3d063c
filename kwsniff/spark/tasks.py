"""One decode task of the fleet pipeline: a capture file, or one flow bucket of it, to Parquet files.

Runs inside Spark's Python workers but imports nothing of Spark: the task is the same core
(:class:`kwsniff.pipeline.session.Session`) that `kwsniff read` runs, with `read`'s Parquet writer
(:class:`TaskSink`): the task writes its tables' files itself and hands Spark one small status row,
so no row crosses the JVM (kwsniff.spark.files publishes the files).

Flow buckets: every task of a bucketed capture reads the whole file but feeds the Session only the
packets whose canonical 4-tuple (the two endpoints, sorted) hashes to its bucket, so both directions
of a connection, and every connection reusing that 4-tuple, land in one task. Packets that are not
TCP go to bucket 0 (they make no rows). In bucketed mode ``conn_id`` is the capture-wide index of
the packet that opened the connection: the driver ranks those indexes per capture, which gives back
exactly the numbering of the unsplit decode (a connection is numbered when its first packet is fed).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa

from kwsniff.capture.split import Frames, RangeScan, SplitCapture, Unsplittable
from kwsniff.memory import record_limit
from kwsniff.net import TcpPacket, parse_tcp
from kwsniff.pipeline.run import Series, failure_reason, fed, file_size, to_end
from kwsniff.pipeline.session import Session, SessionOptions
from kwsniff.sinks.parquet import ParquetSink
from kwsniff.spark.inputs import is_uri, open_input, shown
from kwsniff.tables.schemas import SCHEMAS

if TYPE_CHECKING:
    from kwsniff.spark.uploads import TableUploads

# The name of a task's files in its folder (`<folder>/<table>/part.parquet`, ParquetSink's layout).
TASK_FILE = "part"
# What a decode task yields: one row, its status (JSON, see ``decode_task``).
STATUS_SCHEMA = pa.schema([("status", pa.string())])


# Fibonacci hashing of the XOR of the two endpoints: symmetric, so both directions of a connection
# land in one bucket, and computable the same way in numpy for a whole range of frames at once.
_GOLDEN = 0x9E3779B97F4A7C15
_MASK64 = (1 << 64) - 1
# LINKTYPE -> (offset of its 2-byte protocol field, which must say IPv4, or -1 for none; offset of
# the IP header): Ethernet, Linux cooked v1 (`tcpdump -i any`) and v2, raw IP.
_VECTOR_LINKS = {
    1: (12, 14),
    113: (14, 16),
    276: (0, 20),
    101: (-1, 0),
    12: (-1, 0),
    14: (-1, 0),
    228: (-1, 0),
}
_VECTOR_ROWS = 1 << 16  # frames per numpy gather: 2.5 MB of index arrays, whatever the range


def _bucket_of(x: int, buckets: int) -> int:
    while x >> 64:  # IPv6 endpoints: fold to 64 bits (IPv4 endpoints are 48 bits and unchanged)
        x = (x & _MASK64) ^ (x >> 64)
    return (((x * _GOLDEN) & _MASK64) >> 32) % buckets


def flow_bucket(linktype: int, data: bytes, buckets: int) -> int:
    """The bucket of a packet: a hash of its two endpoints (stable across processes, unlike hash())."""
    p = parse_tcp(linktype, data)
    if type(p) is str:
        return 0
    src, sport, dst, dport = cast(TcpPacket, p)[:4]
    return _bucket_of(
        (int.from_bytes(src, "big") << 16 | sport) ^ (int.from_bytes(dst, "big") << 16 | dport), buckets
    )


def flow_buckets(data: Any, frames: Frames, buckets: int) -> Any:
    """``flow_bucket`` of every frame of ``frames`` (a numpy array), ``data`` the mapped file.

    IPv4 without options carrying TCP, after a link header of fixed size (``_VECTOR_LINKS``), is
    hashed in numpy from fixed offsets; every other frame goes through ``flow_bucket``, which gives
    the same bucket for the same flow."""
    import numpy as np

    offsets = np.frombuffer(frames.offsets, dtype=np.int64) + frames.header
    caplens = np.frombuffer(frames.caplens, dtype=np.int64)
    linktypes = frames.linktypes
    if isinstance(linktypes, int):
        kinds = np.full(len(offsets), linktypes)
    else:
        kinds = np.frombuffer(linktypes, dtype=np.dtype(f"i{linktypes.itemsize}"))
    out = np.zeros(len(offsets), dtype=np.int64)
    done = np.zeros(len(offsets), dtype=bool)
    buf = np.frombuffer(data, dtype=np.uint8)
    for linktype, (proto, ip) in _VECTOR_LINKS.items():
        for lo in range(0, len(offsets), _VECTOR_ROWS):
            hi = lo + _VECTOR_ROWS
            rows = np.nonzero((kinds[lo:hi] == linktype) & (caplens[lo:hi] >= ip + 40))[0] + lo
            at = offsets[rows]
            # A 20-byte IPv4 header, TCP, not a fragment (and the link's protocol field says IPv4).
            tcp4 = (buf[at + ip] == 0x45) & (buf[at + ip + 9] == 6)
            tcp4 &= ((buf[at + ip + 6] & 0x3F) == 0) & (buf[at + ip + 7] == 0)
            if proto >= 0:
                tcp4 &= (buf[at + proto] == 8) & (buf[at + proto + 1] == 0)
            rows, at = rows[tcp4], at[tcp4] + ip
            # Each endpoint as 48 bits, address then port: IP bytes 12-15 and TCP 0-1, 16-19 and 2-3.
            src = np.zeros(len(at), dtype=np.uint64)
            dst = np.zeros(len(at), dtype=np.uint64)
            for src_byte, dst_byte in ((12, 16), (13, 17), (14, 18), (15, 19), (20, 22), (21, 23)):
                src = src << np.uint64(8) | buf[at + src_byte]
                dst = dst << np.uint64(8) | buf[at + dst_byte]
            out[rows] = (((src ^ dst) * np.uint64(_GOLDEN)) >> np.uint64(32)) % np.uint64(buckets)
            done[rows] = True
    linktype_of = (lambda i: linktypes) if isinstance(linktypes, int) else linktypes.__getitem__
    for i in np.nonzero(~done)[0].tolist():
        start = int(offsets[i])
        out[i] = flow_bucket(linktype_of(i), data[start : start + int(caplens[i])], buckets)
    return out


# What an index task yields: per byte range, one summary row (bucket -1: where its walk started and
# stopped, why it broke, why the file cannot be split) and one row per flow bucket holding the
# offsets (int64, native order) of the bucket's records that start in the range, and their bytes.
INDEX_SCHEMA = pa.schema(
    [
        ("path", pa.string()),
        ("part", pa.int32()),
        ("start", pa.int64()),
        ("end", pa.int64()),
        ("bucket", pa.int32()),
        ("first", pa.int64()),
        ("stop", pa.int64()),
        ("damaged", pa.string()),
        ("unsplittable", pa.string()),
        ("first_ts", pa.int64()),
        ("offsets", pa.binary()),
        ("bytes", pa.int64()),
    ]
)


UNREADABLE = "not a readable capture"  # the decode task says why, as one error line


def index_range(path: str, part: int, start: int, end: int, buckets: int) -> list[dict[str, Any]]:
    """The INDEX_SCHEMA rows of one byte range of one capture."""
    from kwsniff.capture import CaptureError

    summary: dict[str, Any] = {"path": path, "part": part, "start": start, "end": end, "bucket": -1}
    if is_uri(path):
        return [{**summary, "unsplittable": "not on a local filesystem"}]
    try:
        with SplitCapture(path) as capture:
            scan = RangeScan()
            frames = capture.walk(start, end, scan)
            summary.update(first=scan.first, stop=scan.stop, damaged=scan.damaged)
            if frames.offsets:
                summary["first_ts"] = next(capture.at(frames.offsets[:1]))[0]
            found = flow_buckets(capture.data, frames, buckets) if frames.offsets else []
    except Unsplittable as exc:
        return [{**summary, "unsplittable": str(exc)}]
    except (CaptureError, OSError):
        # Not a capture at all: the unsplit path reports it, as `kwsniff read` would.
        return [{**summary, "unsplittable": UNREADABLE}]
    rows = [summary]
    if len(found):
        import numpy as np

        offsets = np.frombuffer(frames.offsets, dtype=np.int64)
        caplens = np.frombuffer(frames.caplens, dtype=np.int64)
        order = np.argsort(found, kind="stable")  # by bucket, file order kept within each
        edges = np.searchsorted(found[order], np.arange(buckets + 1))
        for bucket in range(buckets):
            mine = order[edges[bucket] : edges[bucket + 1]]
            if len(mine):
                rows.append(
                    {
                        "path": path,
                        "part": part,
                        "bucket": bucket,
                        "offsets": offsets[mine].tobytes(),
                        "bytes": int(caplens[mine].sum()),
                    }
                )
    return rows


def capture_date(ts_us: int) -> str:
    """The `date=` partition of a capture: the UTC day of its first packet."""
    return datetime.fromtimestamp(ts_us / 1e6, UTC).date().isoformat()


class TaskSink:
    """Rows of one task written by the task itself, as Parquet files under ``folder`` (one per table,
    ``folder/<table>/part.parquet``), through :class:`kwsniff.sinks.parquet.ParquetSink`: `read`'s
    writer (rows kept as tuples, Arrow columns built per batch, zstd). No row crosses the JVM; the
    driver later moves the files of the captures that did not fail into the dataset.

    In bucketed mode ``conn_ids`` maps each local ``conn_id`` to the index of the packet that opened
    the connection (known before any row of it), and the topic ids that `partitions` rows name are
    kept for the driver (:class:`kwsniff.spark.pipeline.BucketFix`)."""

    def __init__(self, folder: str, tables: tuple[str, ...], conn_ids: dict[int, int] | None = None) -> None:
        self.folder = folder
        self.tables = tables
        self.parquet = ParquetSink(folder, TASK_FILE, tables)
        self.conn_ids = conn_ids
        self.topic_names: dict[str, str] = {}
        # `partitions` rows as values in schema order (kwsniff.rows.builder: the compiled ones) go to
        # the Parquet writer as `read`'s do; where a bucketed one's conn_id, topic and topic_id are.
        self.names = self.parquet.names
        # Rows made as values (compiled.exchange_rows): a bucketed `requests` row's conn_id is made
        # capture-wide by add, so bucketed tasks take them as row dicts.
        self.values_tables = self.parquet.values_tables if conn_ids is None else frozenset({"partitions"})
        columns = SCHEMAS["partitions"].names
        self._at = (columns.index("conn_id"), columns.index("topic"), columns.index("topic_id"))

    def add(self, table: str, row: dict[str, Any]) -> None:
        if table not in self.tables:
            return
        if self.conn_ids is not None:
            row["conn_id"] = self.conn_ids[row["conn_id"]]
            if table == "partitions":
                self._name_topic(row.get("topic"), row.get("topic_id"))
        self.parquet.add(table, row)

    def _name_topic(self, topic: str | None, topic_id: str | None) -> None:
        if topic is not None and topic_id is not None:
            self.topic_names.setdefault(topic_id, topic)

    def columns(self, table: str) -> tuple[str, ...]:
        return self.parquet.columns(table)

    def add_values(self, table: str, values: tuple[Any, ...]) -> None:
        """:meth:`add` for a `partitions` row already in schema order (ParquetSink.add_values)."""
        if table in self.tables:
            self.parquet.add_values(table, self._bucketed(values))

    def add_many_values(self, table: str, many: list[tuple[Any, ...]]) -> None:
        if table in self.tables:
            self.parquet.add_many_values(table, [self._bucketed(v) for v in many])

    def _bucketed(self, values: tuple[Any, ...]) -> tuple[Any, ...]:
        """A `partitions` row's ``values`` as :meth:`add` keeps it: in bucketed mode its conn_id made
        capture-wide and the topic id it names kept."""
        if self.conn_ids is None:
            return values
        conn_at, topic_at, topic_id_at = self._at
        self._name_topic(values[topic_at], values[topic_id_at])
        out = list(values)
        out[conn_at] = self.conn_ids[values[conn_at]]
        return tuple(out)

    def close(self) -> dict[str, int]:
        """Writes every file and returns the rows of each table."""
        self.parquet.close()
        return dict(self.parquet.counts)

    def __enter__(self) -> TaskSink:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is not None:  # a failed task leaves no file behind
            self.parquet.abort()


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


def _numbered(packets: Iterator[tuple[int, int, bytes]]) -> Iterator[tuple[int, int, int, bytes]]:
    for n, (ts, linktype, data) in enumerate(packets):
        yield n, ts, linktype, data


def _records_at(path: str, offsets: list[bytes]) -> Iterator[tuple[int, int, int, bytes]]:
    """The records at ``offsets`` (int64 arrays of several flow buckets), in file order."""
    import numpy as np

    wanted = np.sort(np.frombuffer(b"".join(offsets), dtype=np.int64)).tolist()
    with SplitCapture(path) as capture:
        for off, (ts, linktype, data) in zip(wanted, capture.at(wanted), strict=True):
            yield off, ts, linktype, data


def decode_task(
    path: str,
    bucket: int,
    buckets: int,
    options: SessionOptions,
    tables: tuple[str, ...],
    spool: str,
    name: str | None = None,
    offsets: list[bytes] | None = None,
    date: str = "",
    pieces: list[str] | None = None,
    remote: TableUploads | None = None,
) -> dict[str, Any]:
    """Decodes one task into Parquet files of its own under ``spool`` and returns its status (below).
    ``buckets`` 1 decodes the whole capture. With ``remote`` (one task per capture), the files are
    then uploaded into the Delta tables' storage, and ``uploaded`` says where (kwsniff.spark.uploads).

    With ``pieces`` (`--continuous`: consecutive pieces of one capture, ``path`` the first of them)
    the pieces are read as one capture in the order of their first timestamps, as `kwsniff read
    --continuous` reads them (kwsniff.pipeline.run.Series); a piece overlapping the one before fails
    the whole series, with the reason read gives.

    With ``offsets`` (the task's record offsets found by ``index_range``, one array per flow bucket
    it was given, and the capture's ``date``) only those records are read; without, every record is
    read and hashed to its bucket.

    The status: the capture's ``name`` (its `capture` value, default the file's name) and ``date``;
    the file's size, the packets this task fed, the reader's warnings, and ``error``, the one-line
    reason when the file is not a readable capture or anything in its decoding raised; ``folder``,
    where its files are (a folder of its own, so that a retried task never meets the files of an
    earlier attempt), and ``rows`` of each table written there; in bucketed mode ``meta``, the
    first-packet ordinals of its connections and the topic ids its `partitions` rows named. A
    failing capture never fails the Spark job: the driver drops the files of all its tasks and
    reports it (as `kwsniff read` does)."""
    state = {"date": date, "name": name or os.path.basename(shown(path))}
    # Uploading tasks write on their executor's own disk (a cluster's executors share none).
    folder = tempfile.mkdtemp(prefix="kwsniff-task-") if remote else os.path.join(spool, uuid.uuid4().hex)
    status: dict[str, Any] = {"bytes": None, "packets": 0, "warnings": [], "error": None}
    status.update(folder=folder, rows={}, meta=None, started=time.time_ns() // 1000)
    started = time.perf_counter()
    try:
        if pieces is not None:
            _decode_series(pieces, options, tables, folder, state, status)
        else:
            _decode(path, bucket, buckets, options, tables, folder, name, offsets, state, status)
        if remote is not None:
            from kwsniff.spark.uploads import upload_task_files

            status["name"] = state["name"]
            files = {t: os.path.join(folder, t, f"{TASK_FILE}.parquet") for t in status["rows"]}
            upload_task_files(remote, files, status)
    except Exception as exc:  # one capture's failure is a row of `captures`, never a dead job
        status["error"] = failure_reason(exc, shown(path))
        if status["bytes"] is None and not is_uri(path):
            status["bytes"] = file_size(path)
    finally:
        if remote is not None:
            shutil.rmtree(folder, ignore_errors=True)
    status["seconds"] = time.perf_counter() - started
    status.update(name=state["name"], date=state["date"])
    return status


def _decode(
    path: str,
    bucket: int,
    buckets: int,
    options: SessionOptions,
    tables: tuple[str, ...],
    folder: str,
    name: str | None,
    offsets: list[bytes] | None,
    state: dict[str, str],
    status: dict[str, Any],
) -> None:
    bucketed = buckets > 1
    sink = TaskSink(folder, tables)
    with sink, open_input(path) as reader:
        name = state["name"] = name or reader.name
        status["bytes"] = reader.size
        session = BucketSession(name, sink, options) if bucketed else Session(name, sink, options)
        if isinstance(session, BucketSession):
            sink.conn_ids = session.first_packet
        # TLS keys in pcapng Decryption Secrets Blocks: read on the way for a whole-file read; a
        # task reading records by offset reads the file's head up to its first packet for them.
        reader.on_secrets = session.add_secrets
        reader.max_record = record_limit(options.memory_limit)
        if offsets is not None:
            next(iter(reader.packets()), None)
        # The ordinal of a packet (its index, or its file offset) numbers the connections it opens.
        source = _records_at(path, offsets) if offsets is not None else _numbered(reader.packets())
        # Reading every record, a bucket task keeps its own (the date is still the capture's first).
        only = bucket if bucketed and offsets is None else -1
        _fed(session, source, state, status, only, buckets)
        status["warnings"] = [*reader.warnings, *session.rows.failure_warnings()]
        status["rows"] = sink.close()
    if bucketed:
        # Node ids of broker addresses this bucket learned, for the rows of the other buckets.
        learned = session.rows.node_ids.directory.learned
        status["meta"] = {
            "conns": sorted(sink.conn_ids.values()),  # type: ignore[union-attr]
            "topics": sink.topic_names,
            "node_ids": sorted([ip, port, node] for (ip, port), node in learned.items()),
        }


def _decode_series(
    pieces: list[str],
    options: SessionOptions,
    tables: tuple[str, ...],
    folder: str,
    state: dict[str, str],
    status: dict[str, Any],
) -> None:
    # A series that fails (a piece overlapping the one before) says the bytes of all its pieces.
    status["bytes"] = sum(file_size(p) or 0 for p in pieces if not is_uri(p)) or None
    sink = TaskSink(folder, tables)
    with sink:
        series = Series(pieces, open_input)
        session = Session(state["name"], sink, options)
        series.on_secrets = session.add_secrets
        series.max_record = record_limit(options.memory_limit)
        _fed(session, _numbered(series.packets()), state, status)
        status["bytes"] = series.size
        status["warnings"] = [*series.warnings, *session.rows.failure_warnings()]
        status["rows"] = sink.close()


def _task_packets(
    session: Session,
    source: Iterator[tuple[int, int, int, bytes]],
    state: dict[str, str],
    seen: list[int],
    only: int,
    buckets: int,
) -> Iterator[tuple[int, int, bytes]]:
    """The packets of ``source`` this task decodes, as (ts, linktype, frame): each numbered for a
    BucketSession before it is fed, the capture's date taken from the first."""
    date = state["date"]
    numbered = isinstance(session, BucketSession)
    for n, ts, linktype, data in source:
        seen[0] = ts
        if not date:
            date = state["date"] = capture_date(ts)
        if only >= 0 and flow_bucket(linktype, data, buckets) != only:
            continue
        if numbered:
            session.packet_index = n  # type: ignore[attr-defined]
        yield ts, linktype, data


def _fed(
    session: Session,
    source: Iterator[tuple[int, int, int, bytes]],
    state: dict[str, str],
    status: dict[str, Any],
    only: int = -1,
    buckets: int = 1,
) -> None:
    """Feeds ``source`` (ordinal, ts, linktype, frame) to ``session`` through the decode loop of
    every capture (kwsniff.pipeline.loop.fed), only the packets of flow bucket ``only`` of
    ``buckets`` when it is not -1; the capture's date is its first packet's."""
    seen = [-1]  # the last packet's time, fed to this task or not
    to_end(fed(_task_packets(session, source, state, seen, only, buckets), session.packet))
    ts = seen[0]
    finished = session.finish()
    status["packets"] = finished.packets
    status["broker_conflicts"] = finished.broker_conflicts
    status["last_ts"] = ts if ts >= 0 else None
