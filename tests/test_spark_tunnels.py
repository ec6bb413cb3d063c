"""`kwsniff spark` on tunnelled, mirrored-twice, fragmented and zstd-compressed captures gives what
`kwsniff read` gives: every packet that is not plain TCP goes to one flow bucket, so a tunnel's
duplicates and a datagram's fragments meet in one task."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import tunnelwire as tw
import zstandard

from kwsniff.pipeline.run import run_capture
from kwsniff.pipeline.session import SessionOptions
from kwsniff.rows import ListSink
from kwsniff.spark.pipeline import decode, write

ROOT = Path(__file__).resolve().parent.parent


def _rows(out: Path, table: str) -> list[dict[str, Any]]:
    return ds.dataset(out / table, partitioning="hive").to_table().to_pylist()


def test_spark_decodes_tunnelled_captures_like_read(spark: Any, tmp_path: Path) -> None:
    inner = tw.inners(tw.resegment(ROOT / "tests" / "data" / "captures" / tw.BASE_CAPTURE))
    paths = []
    for name in ("vxlan", "duplicates_under_two_vnis", "outer_ipv4_fragments_shuffled"):
        paths.append(tw.write(tmp_path / f"{name}.pcap", tw.wrapped(inner, tw.WRAPS[name][0])))
    packed = tmp_path / "geneve.pcap.zst"
    plain_geneve = tw.write(tmp_path / "geneve.pcap", tw.wrapped(inner, tw.WRAPS["geneve_with_options"][0]))
    packed.write_bytes(zstandard.ZstdCompressor().compress(plain_geneve.read_bytes()))
    paths.append(packed)
    decoded = decode(spark, [str(p) for p in paths], buckets=3, options=SessionOptions(), range_bytes=1 << 14)
    assert decoded.failed() == []
    write(decoded, tmp_path / "out")
    got = Counter(r["capture"] for r in _rows(tmp_path / "out", "requests"))
    assert sorted(got.items()) == sorted((p.name, 46) for p in paths)
    tunnels = _rows(tmp_path / "out", "connections")
    assert sorted({(r["capture"], r["tunnel"]) for r in tunnels}) == [
        ("duplicates_under_two_vnis.pcap", "vxlan:vni=42,vxlan:vni=43"),
        ("geneve.pcap.zst", "geneve:vni=5001"),
        ("outer_ipv4_fragments_shuffled.pcap", "vxlan:vni=42"),
        ("vxlan.pcap", "vxlan:vni=42"),
    ]
    dup = sum(r["duplicate_packets"] for r in tunnels if r["capture"] == "duplicates_under_two_vnis.pcap")
    sink = ListSink()
    run_capture(paths[1], sink, SessionOptions())
    assert dup == sum(c["duplicate_packets"] for c in sink.tables["connections"]) == 215
