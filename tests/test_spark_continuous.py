"""`kwsniff spark --continuous`: each directory is a series of consecutive pieces of one capture,
decoded in one Spark task with TCP state, pairing and learned brokers carried across the pieces, so
its tables are those `kwsniff read --continuous` writes for the same pieces, and those of the whole
capture; a series whose pieces overlap fails, and its `captures` row says why, as read refuses."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
from click.testing import CliRunner
from scapy.layers.l2 import Ether  # noqa: F401 - registers Ethernet as linktype 1 for rdpcap
from scapy.utils import PcapWriter, rdpcap

from kwsniff.cli import main
from kwsniff.pipeline.run import result_row, run_capture, run_series
from kwsniff.pipeline.session import SessionOptions
from kwsniff.rows import ListSink
from kwsniff.spark.inputs import expand_series
from kwsniff.spark.pipeline import decode, write
from kwsniff.tables.schemas import SCHEMAS

CAPTURES = Path(__file__).resolve().parent / "data" / "captures"
TABLES = ("requests", "partitions", "errors", "groups", "connections")
TIMING = ("started", "duration_ms", "date")  # of the run, not of the capture


def cut(capture: Path, cuts: list[int], names: list[str]) -> list[Path]:
    """The capture cut (by scapy) before the packets at ``cuts``, piece n written to ``names[n]``."""
    packets = rdpcap(str(capture))
    bounds = [0, *cuts, len(packets)]
    for name, a, b in zip(names, bounds, bounds[1:], strict=False):
        Path(name).parent.mkdir(parents=True, exist_ok=True)
        with PcapWriter(name, linktype=1) as w:
            for p in packets[a:b]:
                w.write(p)
    return [Path(n) for n in names]


def rows(sink: ListSink, table: str) -> list[dict[str, Any]]:
    """Rows as a Parquet dataset holds them (through the table's Arrow schema), in a fixed order."""
    found = pa.Table.from_pylist(sink.tables[table], schema=SCHEMAS[table]).to_pylist()
    return sorted(found, key=repr)


def spark_rows(got: dict[str, list[dict[str, Any]]], table: str, capture: str) -> list[dict[str, Any]]:
    return sorted((r for r in got[table] if r["capture"] == capture), key=repr)


def test_series_are_decoded_as_read_continuous_decodes_them(spark: Any, tmp_path: Path) -> None:
    # Time order c, a, b: named so that the order of their names is not the order of their packets.
    cut(CAPTURES / "kafka_python.pcap", [50, 110], [str(tmp_path / "one" / f"{n}.pcap") for n in "cab"])
    cut(CAPTURES / "acks_modes.pcap", [200], [str(tmp_path / "two" / n) for n in ("d.pcap", "e.pcap")])
    overlapping = cut(
        CAPTURES / "kafka_python.pcap", [80], [str(tmp_path / "three" / n) for n in ("f.pcap", "g.pcap")]
    )
    # A piece given twice overlaps itself: f.pcap and h.pcap begin together, h after f (named so).
    shutil.copy(overlapping[0], tmp_path / "three" / "h.pcap")
    series = expand_series([str(tmp_path / "one"), str(tmp_path / "two" / "*.pcap"), str(tmp_path / "three")])
    assert [[Path(p).name for p in s] for s in series] == [
        ["a.pcap", "b.pcap", "c.pcap"],
        ["d.pcap", "e.pcap"],
        ["f.pcap", "g.pcap", "h.pcap"],
    ]
    decoded = decode(spark, [], options=SessionOptions(), series=series)
    write(decoded, tmp_path / "out")
    got = {
        t: ds.dataset(tmp_path / "out" / t, partitioning="hive").to_table().drop_columns("date").to_pylist()
        for t in TABLES
    }
    for pieces, whole in ((series[0], "kafka_python.pcap"), (series[1], "acks_modes.pcap")):
        read = ListSink()
        result = run_series([Path(p) for p in pieces], read, SessionOptions())
        complete = ListSink()
        run_capture(CAPTURES / whole, complete, SessionOptions(), name=result.name)
        for table in TABLES:
            assert spark_rows(got, table, result.name) == rows(read, table) == rows(complete, table), table
        row = next(r for r in decoded.captures if r["capture"] == result.name)
        expected = result_row(result)
        assert {k: v for k, v in row.items() if k not in TIMING} == {
            k: v for k, v in expected.items() if k not in TIMING
        }
    # Named after its first piece in time: c.pcap holds the first packets of the capture.
    assert [r["capture"] for r in decoded.captures] == ["c.pcap", "d.pcap", "f.pcap"]
    assert decoded.rows["requests"] == 46 + len(spark_rows(got, "requests", "d.pcap"))
    failed = decoded.captures[2]
    assert failed["status"] == "failed" and failed["packets"] is None
    assert failed["reason"].startswith(f"{tmp_path / 'three' / 'h.pcap'}: begins ")
    assert failed["reason"].endswith(
        f"before the end of {tmp_path / 'three' / 'f.pcap'}: not consecutive pieces of one capture"
    )
    assert spark_rows(got, "requests", "f.pcap") == []


def test_continuous_keeps_each_series_in_one_task(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["spark", "--continuous", "--flow-buckets", "2", str(tmp_path), "--out", str(tmp_path / "t")]
    )
    assert result.exit_code == 2
    assert "--continuous decodes each series in one task" in result.output


def test_a_series_that_cannot_be_read_fails_the_run_after_the_others_are_written(tmp_path: Path) -> None:
    """`spark --continuous` with one good series and one whose pieces overlap: the good one's
    tables are written, and the run says which series failed and exits 1 (it used to exit 0)."""
    from tests.realparts import run_kwsniff

    cut(CAPTURES / "kafka_python.pcap", [50], [str(tmp_path / "good" / n) for n in ("a.pcap", "b.pcap")])
    bad = cut(CAPTURES / "kafka_python.pcap", [80], [str(tmp_path / "bad" / n) for n in ("f.pcap", "g.pcap")])
    shutil.copy(bad[0], tmp_path / "bad" / "h.pcap")
    out = tmp_path / "out"
    done = run_kwsniff(
        "spark",
        "--continuous",
        str(tmp_path / "good"),
        str(tmp_path / "bad"),
        "--out",
        str(out),
        "--master",
        "local[1]",
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert done.stderr.splitlines()[-1] == (
        f"kwsniff: error: 1 of 2 series could not be read as one capture: f.pcap: {tmp_path / 'bad' / 'h.pcap'}: "
        f"begins 0.098174 s before the end of {tmp_path / 'bad' / 'f.pcap'}: not consecutive pieces of one capture"
    )
    assert ds.dataset(out / "requests", partitioning="hive").count_rows() == 46
