"""The Parquet writer's compiled row-to-column conversion (kwsniff/sinks/_columns.c) against Arrow's own
conversion of the same row tuples (`pa.array(rows, type=struct)`, pyarrow's converter: an independent
implementation), and its refusals.

The extension must be built and used where kwsniff is installed, and off under KWSNIFF_PURE_PYTHON=1;
a batch it builds must equal Arrow's arrays value for value and null for null, for every column type
the tables use; anything Arrow would convert differently or refuse (a value of another type, an int
out of its column's range, a str that is not UTF-8) gets no answer (None), and the sink converts that
batch with Arrow as before. Same Parquet bytes end to end: tests/test_partfacts.py (`read` with and
without the extensions) and tests/test_golden_tables.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kwsniff.sinks import parquet
from kwsniff.sinks.parquet import ParquetSink
from kwsniff.tables.schemas import SCHEMAS

PURE = {**os.environ, "KWSNIFF_PURE_PYTHON": "1"}
COMPILED = {k: v for k, v in os.environ.items() if k != "KWSNIFF_PURE_PYTHON"}

SCHEMA = pa.schema(
    [
        ("q", pa.int64()),
        ("t", pa.timestamp("us", tz="UTC")),
        ("i", pa.int32()),
        ("h", pa.int16()),
        ("d", pa.float64()),
        ("b", pa.bool_()),
        ("s", pa.string()),
        ("y", pa.binary()),
    ]
)
KINDS = "qtihd?sy".replace("t", "q")
RANGES = {"q": 63, "t": 63, "i": 31, "h": 15}


def arrow(rows: list[tuple[Any, ...]], schema: pa.Schema = SCHEMA) -> pa.RecordBatch:
    """The oracle: Arrow's conversion of the tuples, as the sink did it before."""
    return pa.RecordBatch.from_arrays(pa.array(rows, type=pa.struct(list(schema))).flatten(), schema=schema)


def compiled(rows: list[tuple[Any, ...]], schema: pa.Schema = SCHEMA) -> pa.RecordBatch | None:
    kinds = parquet._kinds(schema)
    assert kinds is not None
    return parquet.column_batch(rows, schema, kinds)


def test_the_extension_is_built_and_used() -> None:
    code = "from kwsniff.sinks import parquet; print(parquet._columns is not None, parquet._kinds(parquet.SCHEMAS['partitions']) is not None)"
    for env, expected in ((COMPILED, ["True", "True"]), (PURE, ["False", "False"])):
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
        )
        assert done.stdout.split() == expected, done.stderr


def test_every_table_is_built_by_it() -> None:
    # Every column type the tables use has a kind (records' binary key and value payloads included).
    assert {name for name, schema in SCHEMAS.items() if parquet._kinds(schema) is None} == set()


def test_each_type_at_its_edges_with_nulls() -> None:
    rows = [
        (2**63 - 1, 1_700_000_000_123_456, 2**31 - 1, 2**15 - 1, 1.5, True, "é topic ✓", b"\x00\xff"),
        (-(2**63), 0, -(2**31), -(2**15), -0.0, False, "", b""),
        (None, None, None, None, None, None, None, None),
        (0, -1, 0, 0, 7, True, "a", b"k"),  # an int in a double column: 7.0, as Arrow makes it
        *[(n, n, n, n, n / 3, n % 2 == 0, str(n), bytes([n])) for n in range(20)],  # bitmaps past a byte
        (None, 5, None, 3, None, None, "last", None),
    ]
    built = compiled(rows)
    assert built is not None
    assert built.equals(arrow(rows))
    assert built.column("q").null_count == 2
    assert built.column("d").to_pylist()[:4] == [1.5, -0.0, None, 7.0]
    assert built.column("s").to_pylist()[:3] == ["é topic ✓", "", None]
    assert built.column("b").to_pylist()[:4] == [True, False, None, True]


def test_an_empty_batch() -> None:
    built = compiled([])
    assert built is not None and built.num_rows == 0 and built.equals(arrow([]))


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("q", 2**63),  # out of int64
        ("i", 2**31),
        ("i", -(2**31) - 1),
        ("h", 2**15),
        ("q", 1.0),  # a float in an int column
        ("q", True),  # a bool is an int subclass: Arrow's business
        ("d", 2**53 + 1),  # an int a double cannot hold exactly
        ("d", "1"),
        ("b", 1),
        ("s", b"bytes"),
        ("s", "\ud800"),  # a lone surrogate: not UTF-8
        ("y", "text"),
        ("y", bytearray(b"x")),
    ],
)
def test_it_refuses_what_arrow_decides(column: str, value: Any) -> None:
    row = [0, 0, 0, 0, 0.0, False, "", b""]
    row[SCHEMA.names.index(column)] = value
    assert parquet._columns.columns([(0, 0, 0, 0, 0.0, False, "", b""), tuple(row)], KINDS) is None


def test_it_refuses_rows_of_another_shape() -> None:
    assert parquet._columns.columns([(0, 0, 0, 0, 0.0, False, "", b"", 1)], KINDS) is None
    assert parquet._columns.columns([[0, 0, 0, 0, 0.0, False, "", b""]], KINDS) is None


def test_a_refused_batch_is_converted_by_arrow(tmp_path: Path) -> None:
    # UTF-8 bytes in a string column: _columns.c takes only str there, Arrow takes both.
    sink = ParquetSink(tmp_path, "cap", ("captures",))
    schema = SCHEMAS["captures"]
    row = tuple("é".encode() if field.type == pa.string() else None for field in schema)
    assert parquet._columns.columns([row], sink.kinds["captures"]) is None
    batch = sink._batch("captures", [row])
    assert batch.equals(arrow([row], schema))
    assert batch.column(schema.names.index("capture")).to_pylist() == ["é"]


def value_of(kind: str) -> st.SearchStrategy[Any]:
    if kind in RANGES:
        bits = RANGES[kind]
        return st.integers(-(2**bits), 2**bits - 1)
    return {
        "d": st.floats(allow_nan=False) | st.integers(-(2**53), 2**53),
        "b": st.booleans(),
        "s": st.text(),
        "y": st.binary(),
    }[kind]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(*(st.none() | value_of(name) for name in SCHEMA.names)), max_size=40))
def test_any_rows_give_arrows_arrays(rows: list[tuple[Any, ...]]) -> None:
    expected = arrow(rows)
    built = compiled(rows)
    assert built is not None
    assert built.equals(expected)


def test_values_a_row_shares_with_the_one_before_are_written_again() -> None:
    # The rows of one exchange share most values as the very same objects (capture, client, times):
    # each must land in every row, past None and past a text column's growth.
    big, name, key, rate = 2**40 + 7, "é topic ✓" * 40, b"\x00k" * 50, 0.25
    shared = (big, big, -(2**31), -(2**15), rate, True, name, key)
    rows = [
        shared,
        shared,
        (None,) * 8,
        shared,
        *[shared] * 200,
        (big, None, 5, 6, 7, False, name, None),
        shared,
    ]
    built = compiled(rows)
    assert built is not None and built.equals(arrow(rows))
    assert built.column("s").to_pylist().count(name) == 205
