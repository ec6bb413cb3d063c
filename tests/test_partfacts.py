"""The compiled Produce/Fetch partition walker (kwsniff/rows/_partfacts.c, kwsniff/rows/compiled.py)
against the Python path and against bodies written by hand from the protocol's documented layout.

The extension must be built and used where kwsniff is installed; `kwsniff read` (counts only, the
mode in which it runs) must write the same Parquet bytes with it and with ``KWSNIFF_PURE_PYTHON=1`` on
every repository capture and on the bench captures that are present (bench/captures/ is not
committed: `python bench/make_bench_captures.py`); and hand-written bodies, their records batches
made by kafka-python's own batch builder, must give the facts written into them, or, for what only
the Python path answers (an error code, trailing bytes, a tagged field, a KRaft metadata fetch), no
answer at all.
"""

from __future__ import annotations

import os
import platform
import struct
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from kwsniff.kafka import OK, Request, Response
from kwsniff.protocol import DecodeError, decode_request_view, decode_response_view
from kwsniff.rows import compiled
from kwsniff.rows.brokers import BrokerDirectory
from kwsniff.rows.builder import ExchangeRows, TableBuilder
from kwsniff.rows.extract import error_rows, request_summary, response_summary
from kwsniff.rows.partitions import merged_rows
from kwsniff.tables.schemas import SCHEMAS

ROOT = Path(__file__).resolve().parent.parent
PURE = {**os.environ, "KWSNIFF_PURE_PYTHON": "1"}
COMPILED = {k: v for k, v in os.environ.items() if k != "KWSNIFF_PURE_PYTHON"}
VARYING = ("started", "duration_ms")  # the `captures` table's columns that differ between two runs
PRODUCE, FETCH = 0, 1


def test_the_extension_is_built_and_used() -> None:
    code = "from kwsniff.rows import compiled; print(compiled.AVAILABLE, compiled.has_plan(1, 11, 1))"
    for env, expected in ((COMPILED, ["True", "True"]), (PURE, ["False", "False"])):
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
        )
        assert done.stdout.split() == expected, done.stderr


def read_tables(captures: list[Path], out: Path, env: dict[str, str]) -> dict[str, bytes]:
    done = subprocess.run(
        [sys.executable, "-m", "kwsniff", "read", *map(str, captures), "--out", str(out), "-q"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_read_writes_the_same_bytes_both_ways(tmp_path: Path) -> None:
    captures = [
        *sorted((ROOT / "tests" / "data" / "captures").glob("*.pcap")),
        ROOT / "sample_pcaps" / "quickstart.pcap",
        *sorted((ROOT / "bench" / "captures").glob("*.pcap")),
        tmp_path / "cut384.pcap",
    ]
    # Cut at 384 bytes, some Fetch facts are values the cut hid (None), merged by both paths.
    produce_codecs = ROOT / "tests" / "data" / "captures" / "produce_codecs.pcap"
    subprocess.run(["editcap", "-s", "384", str(produce_codecs), str(captures[-1])], check=True, timeout=60)
    compiled_files = read_tables(captures, tmp_path / "compiled", COMPILED)
    pure_files = read_tables(captures, tmp_path / "pure", PURE)
    assert sorted(compiled_files) == sorted(pure_files)
    assert {name.split("/")[0] for name in compiled_files} >= {"requests", "partitions", "errors", "captures"}
    rows = 0
    for name, data in compiled_files.items():
        if name.startswith("captures/"):
            both = [
                pq.read_table(tmp_path / side / name).drop_columns(list(VARYING)).to_pylist()
                for side in ("compiled", "pure")
            ]
            assert both[0] == both[1], name
        else:
            assert data == pure_files[name], name
            if name.startswith("partitions/"):
                rows += pq.read_metadata(tmp_path / "compiled" / name).num_rows
    # The repository's captures alone hold 475 `partitions` rows (the bench captures, when made, more).
    assert rows >= 475


# -- bodies written by hand (Kafka's protocol guide: int16/int32 lengths below the first flexible
# version, compact uvarint lengths plus one and tagged fields from it) ------------------------------


def batch(base_offset: int, values: list[bytes]) -> bytes:
    """A magic 2 record batch built by kafka-python (an independent writer), at ``base_offset``."""
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
    for i, value in enumerate(values):
        builder.append(i, timestamp=1_700_000_000_000 + i, key=None, value=value, headers=[])
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base_offset)  # the base offset is outside the CRC
    return bytes(data)


def string16(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def fetch_v11_response(partitions: list[tuple[int, int, int, bytes | None]], top_error: int = 0) -> bytes:
    """Fetch v11 response: throttle, error, session, one topic "orders" with (partition, error,
    high watermark, records) partitions."""
    body = struct.pack(">ihii", 7, top_error, 0, 1) + string16("orders") + struct.pack(">i", len(partitions))
    for index, error, high_watermark, records in partitions:
        body += struct.pack(">ihqqq", index, error, high_watermark, high_watermark, 2)
        body += struct.pack(">i", -1)  # aborted_transactions: null
        body += struct.pack(">i", -1)  # preferred_read_replica
        body += struct.pack(">i", -1) if records is None else struct.pack(">i", len(records)) + records
    return body


def uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        if n < 0x80:
            return bytes(out + bytes([n]))
        out.append(n & 0x7F | 0x80)
        n >>= 7


def produce_v9_request(topic: str, partitions: list[tuple[int, bytes]], root_tags: bytes = b"\x00") -> bytes:
    """Produce v9 (flexible) request: no transactional id, acks -1, one topic."""
    body = uvarint(0) + struct.pack(">hi", -1, 30_000) + uvarint(2)
    body += uvarint(len(topic) + 1) + topic.encode() + uvarint(len(partitions) + 1)
    for index, records in partitions:
        body += struct.pack(">i", index) + uvarint(len(records) + 1) + records + b"\x00"
    return body + b"\x00" + root_tags


def fetch_v11_request(topic: str, offsets: list[tuple[int, int]]) -> bytes:
    body = struct.pack(">iiiibii", -1, 500, 1, 52428800, 0, 0, -1) + struct.pack(">i", 1) + string16(topic)
    body += struct.pack(">i", len(offsets))
    for index, offset in offsets:
        body += struct.pack(">iiqqi", index, -1, offset, -1, 1048576)
    return body + struct.pack(">i", 0) + string16("")  # no forgotten topics, rack ""


def fetch_v12_request(topic: str, offsets: list[tuple[int, int]], root_tags: bytes = b"\x00") -> bytes:
    """Fetch v12 (flexible) request of a consumer; ``root_tags`` its root's tagged fields section."""
    body = struct.pack(">iiiibii", -1, 500, 1, 52428800, 0, 0, -1) + uvarint(2)
    body += uvarint(len(topic) + 1) + topic.encode() + uvarint(len(offsets) + 1)
    for index, offset in offsets:
        body += struct.pack(">iiqiqi", index, -1, offset, -1, -1, 1048576) + b"\x00"
    return body + b"\x00" + uvarint(1) + uvarint(1) + root_tags  # no forgotten topics, rack ""


COUNTS_NONE = {
    "crc_errors": 0,
    "partial_bytes": 0,
    "capped_batches": 0,
    "record_errors": 0,
    "record_error": None,
}


def test_fetch_response_facts_are_the_values_written() -> None:
    three, one = batch(100, [b"a", b"bb", b"ccc"]), batch(103, [b"d"])
    body = fetch_v11_response([(0, 0, 103, three + one), (5, 0, 40, None), (6, 0, 9, b"")])
    info = compiled.response_info(FETCH, 11, body)
    assert info is not None
    assert info["throttle_time_ms"] == 7 and info["error_code"] == 0
    assert info["record_count"] == 4 and info["record_bytes"] == len(three) + len(one)
    parts = info["partitions"]
    assert list(parts) == [(None, "orders", 0), (None, "orders", 5), (None, "orders", 6)]
    common = {"topic": "orders", "error_code": 0, "log_start_offset": 2, "compression": None, **COUNTS_NONE}
    assert parts[(None, "orders", 0)] == {
        **common,
        "partition": 0,
        "high_watermark": 103,
        "last_stable_offset": 103,
        "record_count": 4,
        "record_bytes": len(three) + len(one),
        "batch_count": 2,
        "compression": "none",
        "control_batches": 0,
        "first_offset": 100,
        "last_offset": 103,
    }
    empty = {"record_count": 0, "record_bytes": 0, "batch_count": 0, "control_batches": 0}
    for index, high in ((5, 40), (6, 9)):
        assert parts[(None, "orders", index)] == {
            **common,
            **empty,
            "partition": index,
            "high_watermark": high,
            "last_stable_offset": high,
            "first_offset": None,
            "last_offset": None,
        }


def test_a_damaged_batch_is_counted_and_a_cut_one_is_partial() -> None:
    good = batch(0, [b"x" * 50])
    bad = bytearray(good)
    bad[-1] ^= 0xFF  # a record byte: inside the CRC
    body = fetch_v11_response([(1, 0, 1, bytes(bad)), (2, 0, 1, good + good[:30])])
    parts = compiled.response_info(FETCH, 11, body)["partitions"]  # type: ignore[index]
    assert parts[(None, "orders", 1)]["crc_errors"] == 1
    assert parts[(None, "orders", 1)]["record_count"] == 1
    assert parts[(None, "orders", 2)]["partial_bytes"] == 30
    assert parts[(None, "orders", 2)]["batch_count"] == 1


def test_produce_and_fetch_requests() -> None:
    records = batch(0, [b"v1", b"v2"])
    info = compiled.request_info(PRODUCE, 9, produce_v9_request("clicks", [(3, records)]))
    assert info == {
        "acks": -1,
        "record_count": 2,
        "record_bytes": len(records),
        "partitions": {
            (None, "clicks", 3): {
                "topic": "clicks",
                "partition": 3,
                "record_count": 2,
                "record_bytes": len(records),
                "batch_count": 1,
                "compression": "none",
                "control_batches": 0,
                **COUNTS_NONE,
            }
        },
    }
    info = compiled.request_info(FETCH, 11, fetch_v11_request("clicks", [(0, 17), (1, 4)]))
    assert info == {
        "max_wait_ms": 500,
        "replica_id": -1,
        "fetcher": "consumer",
        "partitions": {
            (None, "clicks", 0): {"topic": "clicks", "partition": 0, "fetch_offset": 17},
            (None, "clicks", 1): {"topic": "clicks", "partition": 1, "fetch_offset": 4},
        },
    }


def test_what_only_the_python_path_answers() -> None:
    good = fetch_v11_response([(0, 0, 1, None)])
    assert compiled.response_info(FETCH, 11, good) is not None
    # An error code anywhere: the errors table needs the decoded message.
    assert compiled.response_info(FETCH, 11, fetch_v11_response([(0, 1, 1, None)])) is None
    assert compiled.response_info(FETCH, 11, fetch_v11_response([(0, 0, 1, None)], top_error=15)) is None
    # Trailing bytes (noted by the Python path), a truncated body, a length past the end.
    assert compiled.response_info(FETCH, 11, good + b"\x00") is None
    assert compiled.response_info(FETCH, 11, good[:-1]) is None
    # A tag at a Fetch request's root (v15+ names the fetching replica in one).
    plain = fetch_v12_request("t", [(0, 1)])
    assert compiled.request_info(FETCH, 12, plain) == {
        "max_wait_ms": 500,
        "replica_id": -1,
        "fetcher": "consumer",
        "partitions": {(None, "t", 0): {"topic": "t", "partition": 0, "fetch_offset": 1}},
    }
    assert compiled.request_info(FETCH, 12, fetch_v12_request("t", [(0, 1)], b"\x01\x07\x01\x00")) is None
    # Elsewhere an unknown tag is skipped (the decoder keeps it raw); a tag past the body is not read.
    produce = produce_v9_request("t", [(0, batch(0, [b"v"]))])
    unknown = produce_v9_request("t", [(0, batch(0, [b"v"]))], root_tags=b"\x01\x05\x01\x00")
    assert (
        compiled.request_info(PRODUCE, 9, unknown) == compiled.request_info(PRODUCE, 9, produce) is not None
    )
    past = produce_v9_request("t", [(0, batch(0, [b"v"]))], root_tags=b"\x01\x05\x09\x00")
    assert compiled.request_info(PRODUCE, 9, past) is None
    # A fetch of the KRaft metadata log (its fetcher is "metadata").
    assert compiled.request_info(FETCH, 11, fetch_v11_request("__cluster_metadata", [(0, 0)])) is None
    # Legacy message sets (magic 1 in a v3+ field): summarize_records reads those.
    legacy = bytearray(batch(0, [b"v"]))
    legacy[16] = 1
    assert compiled.response_info(FETCH, 11, fetch_v11_response([(0, 0, 1, bytes(legacy))])) is None
    # Versions whose records fields hold message sets have no plan.
    assert not compiled.has_plan(PRODUCE, 2, 0) and not compiled.has_plan(FETCH, 3, 1)


# -- damaged bodies: the walker answers what the Python path answers, or leaves it to it ------------

BODIES = [
    (
        FETCH,
        11,
        True,
        fetch_v11_response([(0, 0, 12, batch(10, [b"a", b"b"])), (1, 0, 3, None), (2, 0, 0, b"")]),
    ),
    (PRODUCE, 9, False, produce_v9_request("t", [(0, batch(0, [b"x" * 20])), (1, batch(0, [b"y", b"z"]))])),
    (FETCH, 11, False, fetch_v11_request("topic", [(0, 5), (1, 6), (2, 7)])),
    (FETCH, 12, False, fetch_v12_request("topic", [(0, 5), (1, 6)])),
    (PRODUCE, 9, False, produce_v9_request("t", [(0, batch(0, [b"v"]))], root_tags=b"\x01\x05\x01\x00")),
]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_damaged_body_gets_the_python_answer_or_none(data: st.DataObject) -> None:
    api_key, version, response, body = data.draw(st.sampled_from(BODIES))
    damaged = bytearray(body)
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(damaged) - 1))
        action = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        if action == "flip":
            damaged[at] ^= data.draw(st.integers(1, 255))
        elif action == "cut":
            del damaged[at:]
        else:
            damaged.insert(at, data.draw(st.integers(0, 255)))
        if not damaged:
            damaged.append(0)
    side = compiled.response_info if response else compiled.request_info
    fast = side(api_key, version, bytes(damaged))
    decode = decode_response_view if response else decode_request_view
    try:
        msg = decode(api_key, version, bytes(damaged))
    except DecodeError:
        assert fast is None
        return
    if fast is None:
        return
    if response:
        assert error_rows(api_key, version, msg) == []
        assert fast == response_summary(api_key, version, msg)
    else:
        assert fast == request_summary(api_key, version, msg)


def test_a_lag_whose_offset_a_snap_length_hid_is_null_on_both_paths() -> None:
    # editcap -s 384 of produce_codecs.pcap: a Fetch request cut inside its last partition's
    # fetch_offset, answered by a response cut inside that partition's log_start_offset.
    columns = ("topic", "partition", "fetch_offset", "high_watermark", "error_code", "error_name", "lag")
    index = {c: i for i, c in enumerate(columns)}
    req = {
        (None, "t", 0): {"topic": "t", "partition": 0, "fetch_offset": 87},
        (None, "t", 1): {"topic": "t", "partition": 1, "fetch_offset": None},
        (None, "t", 2): {"topic": "t", "partition": 2, "fetch_offset": 103},
    }
    resp = {
        (None, "t", 0): {"topic": "t", "partition": 0, "error_code": 0, "high_watermark": 90},
        (None, "t", 1): {"topic": "t", "partition": 1, "error_code": 0, "high_watermark": 110},
        (None, "t", 2): {"topic": "t", "partition": 2, "error_code": 0, "high_watermark": None},
    }
    expected = [
        ("t", 0, 87, 90, 0, "NONE", 3),
        ("t", 1, None, 110, 0, "NONE", None),
        ("t", 2, 103, None, 0, "NONE", None),
    ]
    base = (None,) * len(columns)
    assert compiled.merge_rows(index, base, {}, req, resp, FETCH, {}) == expected
    python = merged_rows(FETCH, {"partitions": req}, {"partitions": resp}, {})
    assert [tuple(row.get(c) for c in columns) for row in python] == expected


def test_record_totals_sum_the_partitions_that_carry_records() -> None:
    # requests.record_count/record_bytes (docs/tables.md): sums over the partitions with records facts;
    # None for both once one partition's records were cut by a snap length; absent when none has any.
    totals = compiled._partfacts.record_totals
    info: dict[str, object] = {"acks": -1}
    parts = {
        ("a", 0): {"record_count": 3, "record_bytes": 300},
        ("a", 1): {"fetch_offset": 7},
        ("b", 0): {"record_count": 0, "record_bytes": 0},
        ("b", 1): {"record_count": 2**40, "record_bytes": 5},
    }
    assert totals(info, parts) is True
    assert info == {"acks": -1, "record_count": 3 + 2**40, "record_bytes": 305}
    cut = {**parts, ("c", 0): {"record_count": None, "record_bytes": None}}
    info = {}
    assert totals(info, cut) is True
    assert info == {"record_count": None, "record_bytes": None}
    info = {}
    assert totals(info, {("a", 1): {"fetch_offset": 7}}) is True
    assert info == {}
    # Not a small int: the Python function answers.
    assert totals({}, {("a", 0): {"record_count": 2**60, "record_bytes": 1}}) is False
    assert totals({}, {("a", 0): {"record_count": 1, "record_bytes": None}}) is False


# -- the walker's own CRC32C, against the crc32c package ------------------------------------------


def test_the_hardware_crc32c_is_the_crc32c_packages() -> None:
    import crc32c

    from kwsniff.records import _crc

    pf = compiled._partfacts
    if platform.machine() not in ("x86_64", "AMD64"):  # the crc32 instruction is x86-64's (SSE4.2)
        assert pf.HARDWARE_CRC32C == 0
        assert _crc.crc32c(b"123456789") == 0xE3069283  # the crc32c package's
        assert _crc.crc32c is not pf.crc32c
        return
    assert pf.HARDWARE_CRC32C == 1
    assert _crc.crc32c is pf.crc32c  # the Python record readers take it too
    # RFC 3720's check values (iSCSI, B.4): 32 zero bytes, 32 0xff bytes, 0..31 ascending
    assert pf.crc32c(bytes(32)) == 0x8A9136AA
    assert pf.crc32c(b"\xff" * 32) == 0x62A8AB43
    assert pf.crc32c(bytes(range(32))) == 0x46DD794E
    assert pf.crc32c(b"123456789") == 0xE3069283
    # every length around the three-stream step (3 x 2,048 bytes) and the 8-byte words, any alignment
    data = bytes((i * 131 + 7) % 251 for i in range(3 * 6144 + 64))
    for length in [*range(0, 70), *range(6130, 6160), *range(12280, 12300), 3 * 6144 + 17]:
        for start in (0, 3):
            piece = memoryview(data)[start : start + length]
            assert pf.crc32c(piece) == crc32c.crc32c(piece), (start, length)
    assert pf.crc32c(bytearray(b"kafka")) == crc32c.crc32c(b"kafka")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=20_000))
def test_the_crc32c_read_uses_agrees_on_any_bytes(data: bytes) -> None:
    import crc32c

    from kwsniff.records import _crc

    assert _crc.crc32c(data) == crc32c.crc32c(data)


def test_a_walk_that_gives_up_leaves_the_callers_dict_empty() -> None:
    plan = compiled._plan(FETCH, 11, compiled.RESPONSE)
    good = fetch_v11_response([(0, 0, 1, None), (1, 0, 1, None)])
    parts: dict[object, object] = {}
    from kwsniff.records import _crc

    assert compiled._partfacts.walk(plan, good, parts, _crc.crc32c, None, None) is not None
    assert list(parts) == [(None, "orders", 0), (None, "orders", 1)]
    # the second partition's error code sends it to the Python path after the first was kept
    failed = fetch_v11_response([(0, 0, 1, None), (1, 3, 1, None)])
    parts = {}
    assert compiled._partfacts.walk(plan, failed, parts, _crc.crc32c, None, None) is None
    assert parts == {}
    # a dict that already holds partitions is merged into at the end, and left alone on giving up
    held = {("x",): {"kept": 1}}
    assert compiled._partfacts.walk(plan, failed, held, _crc.crc32c, None, None) is None
    assert held == {("x",): {"kept": 1}}
    assert compiled._partfacts.walk(plan, good, held, _crc.crc32c, None, None) is not None
    assert set(held) == {(None, "orders", 0), (None, "orders", 1), ("x",)}


def fresh(name: str) -> str:
    """``name`` as a new string object, equal but not the interned one the walker uses."""
    made = "".join([name[:1], name[1:]])
    assert made == name and (made is not name or len(name) < 2)
    return made


def test_merged_rows_read_facts_by_name_not_by_the_strings_identity() -> None:
    # merge_rows reads each fact once and by role (error code, topic, damage...): a fact under an equal
    # string that is not the walker's own must count, and the response's value over the request's.
    columns = (
        "topic",
        "partition",
        "fetch_offset",
        "high_watermark",
        "error_code",
        "error_name",
        "lag",
        "crc_errors",
    )
    index = {c: i for i, c in enumerate(columns)}
    base = (None,) * len(columns)

    def facts(**values: object) -> dict[str, object]:
        return {fresh(k): v for k, v in values.items()}

    req = {(None, "t", 0): facts(topic="t", partition=0, fetch_offset=5, crc_errors=2)}
    resp = {(None, "t", 0): facts(topic="t", partition=0, error_code=0, high_watermark=9, crc_errors=0)}
    expected = [("t", 0, 5, 9, 0, "NONE", 4, 0)]
    assert compiled.merge_rows(index, base, {}, req, resp, FETCH, {}) == expected
    python = merged_rows(FETCH, {"partitions": req}, {"partitions": resp}, {})
    assert [tuple(row.get(c) for c in columns) for row in python] == expected
    # What sends a row to the Python path, each under a fresh name: damage, an error code, records.
    for change in (
        {fresh("crc_errors"): 1},
        {fresh("error_code"): 6},
        {fresh("_records"): []},
        {fresh("_past_int64"): 1},
    ):
        answered = {(None, "t", 0): {**resp[(None, "t", 0)], **change}}
        assert compiled.merge_rows(index, base, {}, req, answered, FETCH, {}) == [None]


# -- whole exchanges: the `requests` and `partitions` rows made by exchange_rows --------------------


class ValuesSink:
    """Rows of `requests` and `partitions` as value tuples in schema order, taken as the Parquet sink
    takes them: a row dict by its columns' names, or values as they come."""

    def __init__(self) -> None:
        self.names = {t: tuple(SCHEMAS[t].names) for t in ("requests", "partitions")}
        self.values_tables = frozenset(self.names)
        self.rows: dict[str, list[tuple[object, ...]]] = {t: [] for t in self.names}

    def columns(self, table: str) -> tuple[str, ...]:
        return self.names[table]

    def add(self, table: str, row: dict[str, object]) -> None:
        if table in self.names:
            self.rows[table].append(tuple(map(row.get, self.names[table])))

    def add_values(self, table: str, values: tuple[object, ...]) -> None:
        self.rows[table].append(values)

    def add_many_values(self, table: str, many: list[tuple[object, ...]]) -> None:
        self.rows[table].extend(many)


BROKER = ("10.0.0.9", 9092)


def exchange_tables(
    request: bytes, response: bytes, *, api_key: int, version: int, compiled_rows: bool, node: int | None
) -> tuple[dict[str, list[tuple[object, ...]]], list[object]]:
    """One exchange through a TableBuilder, with exchange_rows or with the Python path alone; the rows
    written, and exchange_rows' answers."""
    sink = ValuesSink()
    brokers = BrokerDirectory(fixed={BROKER: node} if node is not None else {})
    tables = TableBuilder("cap.pcap", sink, brokers=brokers)
    answers: list[object] = []
    exchange_rows = compiled.exchange_rows

    def watched(*args: object) -> object:
        answers.append(exchange_rows(*args))  # type: ignore[arg-type]
        return answers[-1]

    if compiled_rows:
        assert tables.exchange_plan is not None
        compiled.exchange_rows = watched  # type: ignore[assignment]
    else:
        tables.exchange_plan = None
    rows = ExchangeRows(tables, 3, "10.0.0.1", BROKER)
    try:
        req = Request(12, 1_000, 1_700_000_000_000_100, len(request) + 16, 0, api_key=api_key,
                      api_version=version, correlation_id=41, client_id="c-1")  # fmt: skip
        rows.request(req, request)
        resp = Response(
            4, 1_700_000_000_003_350, 1_700_000_000_003_400, len(response) + 8, 0, correlation_id=41
        )
        rows.response(req, resp, response)
        rows.exchange(req, resp, OK)
        tables.finish(None)
    finally:
        compiled.exchange_rows = exchange_rows  # type: ignore[assignment]
    return sink.rows, answers


def test_an_exchange_written_by_compiled_code_has_the_python_paths_rows() -> None:
    fetch = (fetch_v11_request("orders", [(0, 5), (1, 0)]),
             fetch_v11_response([(0, 0, 9, batch(5, [b"a", b"b"])), (1, 0, 0, None)]))  # fmt: skip
    produce_request = produce_v9_request("orders", [(2, batch(0, [b"x"]))])
    produce = (produce_request, uvarint(2) + uvarint(7) + b"orders" + uvarint(2) + struct.pack(">ihqqq", 2, 0, 70, -1, 0)
               + uvarint(1) + uvarint(0) + b"\x00" + b"\x00" + struct.pack(">i", 0) + b"\x00")  # fmt: skip
    for (request, response), api_key, version in ((fetch, FETCH, 11), (produce, PRODUCE, 9)):
        python, _ = exchange_tables(
            request, response, api_key=api_key, version=version, compiled_rows=False, node=1
        )
        fast, answers = exchange_tables(
            request, response, api_key=api_key, version=version, compiled_rows=True, node=1
        )
        assert fast == python
        assert len(answers) == 1 and answers[0] is not None, api_key  # written by exchange_rows
        (row,) = python["requests"]
        named = dict(zip(SCHEMAS["requests"].names, row, strict=True))
        assert named["status"] == "ok" and named["broker_id"] == 1 and named["latency_ms"] == 3.25
        assert named["api_name"] == ("Fetch" if api_key == FETCH else "Produce")
        assert len(python["partitions"]) == (2 if api_key == FETCH else 1)
        if api_key == PRODUCE:
            assert (
                dict(zip(SCHEMAS["partitions"].names, python["partitions"][0], strict=True))["last_offset"]
                == 70
            )
        # A broker without a node id yet: its rows are held (and written at the end) by the Python path.
        python, _ = exchange_tables(
            request, response, api_key=api_key, version=version, compiled_rows=False, node=None
        )
        fast, answers = exchange_tables(
            request, response, api_key=api_key, version=version, compiled_rows=True, node=None
        )
        assert fast == python and answers == [None]
    # An error code anywhere: the errors table and its names are the Python path's.
    failed = fetch_v11_response([(0, 0, 9, None)], top_error=7)
    python, _ = exchange_tables(fetch[0], failed, api_key=FETCH, version=11, compiled_rows=False, node=1)
    fast, answers = exchange_tables(fetch[0], failed, api_key=FETCH, version=11, compiled_rows=True, node=1)
    assert fast == python and answers == [None]


def test_merged_rows_pair_partitions_by_key_in_any_order() -> None:
    # A response names the request's partitions in the request's order (paired as they come), or in
    # another order, or names others too: rows in the request's order, then the response's own.
    columns = ("topic", "partition", "fetch_offset", "high_watermark", "lag")
    index = {c: i for i, c in enumerate(columns)}
    base = (None,) * len(columns)

    def parts(*items: tuple[int, str, int]) -> dict[tuple[None, str, int], dict[str, object]]:
        return {(None, "t", p): {"topic": "t", "partition": p, name: v} for p, name, v in items}

    req = parts((0, "fetch_offset", 5), (1, "fetch_offset", 7))
    for resp in (
        parts((0, "high_watermark", 9), (1, "high_watermark", 8)),
        parts((1, "high_watermark", 8), (0, "high_watermark", 9)),
        parts((0, "high_watermark", 9), (2, "high_watermark", 4)),
        parts((3, "high_watermark", 1), (2, "high_watermark", 4)),
    ):
        python = merged_rows(FETCH, {"partitions": req}, {"partitions": resp}, {})
        expected = [tuple(row.get(c) for c in columns) for row in python]
        assert compiled.merge_rows(index, base, {}, req, resp, FETCH, {}) == expected
    assert expected == [
        ("t", 0, 5, None, None),
        ("t", 1, 7, None, None),
        ("t", 3, None, 1, None),
        ("t", 2, None, 4, None),
    ]
