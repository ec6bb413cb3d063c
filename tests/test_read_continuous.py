"""`kwsniff read --continuous`: a capture cut into consecutive files (a rotated set) gives the tables of
the whole capture; files that overlap are refused in one line."""

from __future__ import annotations

from pathlib import Path

import pyarrow.dataset as ds
from click.testing import CliRunner
from scapy.layers.l2 import Ether  # noqa: F401 - registers Ethernet as linktype 1 for rdpcap
from scapy.utils import PcapWriter, rdpcap

from kwsniff.cli import main
from kwsniff.pipeline.run import run_capture, run_series
from kwsniff.pipeline.session import SessionOptions
from kwsniff.rows import ListSink

CAPTURE = Path(__file__).parent / "data" / "captures" / "kafka_python.pcap"


def pieces(tmp_path: Path, cuts: list[int]) -> list[Path]:
    """The capture cut (by scapy) before the packets at ``cuts``, as tcpdump -C would rotate it."""
    packets = rdpcap(str(CAPTURE))
    bounds = [0, *cuts, len(packets)]
    paths = []
    for n, (a, b) in enumerate(zip(bounds, bounds[1:], strict=False)):
        path = tmp_path / f"piece{n}.pcap"
        with PcapWriter(str(path), linktype=1) as w:
            for p in packets[a:b]:
                w.write(p)
        paths.append(path)
    return paths


def tables(result_sink: ListSink) -> dict[str, list[dict]]:
    return {k: result_sink.tables[k] for k in ("requests", "partitions", "errors", "groups", "connections")}


def test_three_pieces_in_any_order_give_the_whole_capture(tmp_path: Path) -> None:
    whole = ListSink()
    run_capture(CAPTURE, whole, SessionOptions(), name="kafka")
    split = pieces(tmp_path, [50, 110])
    # Alone, each piece loses what crosses its edges.
    alone = ListSink()
    run_capture(split[1], alone, SessionOptions(), name="kafka")
    assert len(alone.tables["requests"]) < 46
    series = ListSink()
    result = run_series([split[2], split[0], split[1]], series, SessionOptions(), name="kafka")
    assert tables(series) == tables(whole)
    assert [Path(p).name for p, _, _ in result.pieces] == ["piece0.pcap", "piece1.pcap", "piece2.pcap"]
    assert all(result.pieces[i][2] <= result.pieces[i + 1][1] for i in range(2))


def test_overlapping_pieces_are_refused_in_one_line(tmp_path: Path) -> None:
    first, second = pieces(tmp_path, [80])
    third = tmp_path / "again.pcap"
    third.write_bytes(first.read_bytes())  # the same piece given twice overlaps itself
    result = CliRunner().invoke(
        main, ["read", "--continuous", str(first), str(second), str(third), "--out", str(tmp_path / "t")]
    )
    assert result.exit_code == 1
    assert result.output.count("\n") == 1
    assert result.output.startswith("kwsniff: error: ")
    assert "s before the end of" in result.output and result.output.rstrip().endswith(
        "not consecutive pieces of one capture"
    )


def test_continuous_on_the_command_line_writes_one_set_of_tables(tmp_path: Path) -> None:
    split = pieces(tmp_path, [40, 100])
    out = tmp_path / "tables"
    result = CliRunner().invoke(main, ["read", "--continuous", *map(str, split), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "pieces in time order: piece0.pcap; piece1.pcap after " in result.output
    requests = ds.dataset(out / "requests").to_table()
    assert requests.num_rows == 46
    assert set(requests.column("capture").to_pylist()) == {"piece0.pcap"}
