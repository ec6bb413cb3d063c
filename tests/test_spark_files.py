"""How the driver of `kwsniff spark` turns the files its tasks wrote into the dataset (no Spark)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from kwsniff.spark.files import BucketFix, Moves, fix_files, move, planned, task_file, write_captures
from kwsniff.tables.schemas import SCHEMAS


def _status(folder: Path, name: str, date: str, rows: dict[str, int], meta: bool = False) -> dict:
    return {"folder": str(folder), "name": name, "date": date, "rows": rows, "meta": {} if meta else None}


def test_files_go_to_date_folders_and_a_table_without_rows_gets_no_file(tmp_path: Path) -> None:
    a = _status(tmp_path / "spool" / "a", "a.pcap", "2026-11-22", {"requests": 3, "groups": 0})
    b = _status(tmp_path / "spool" / "b", "b.pcap", "2026-11-23", {"requests": 1, "groups": 2})
    stage = tmp_path / "stage"
    moves = planned([a, b], {}, stage)
    assert moves == Moves(
        plain=[
            (task_file(a["folder"], "requests"), str(stage / "requests/date=2026-11-22/part-00000.parquet")),
            (task_file(b["folder"], "groups"), str(stage / "groups/date=2026-11-23/part-00001.parquet")),
            (task_file(b["folder"], "requests"), str(stage / "requests/date=2026-11-23/part-00001.parquet")),
        ]
    )
    for source, _ in moves.plain:
        Path(source).parent.mkdir(parents=True, exist_ok=True)
        Path(source).write_bytes(b"x")
    move(moves.plain)
    assert sorted(str(p.relative_to(stage)) for p in stage.rglob("*.parquet")) == [
        "groups/date=2026-11-23/part-00001.parquet",
        "requests/date=2026-11-22/part-00000.parquet",
        "requests/date=2026-11-23/part-00001.parquet",
    ]


def test_bucket_files_are_rewritten_with_connections_ranked_and_topics_named(tmp_path: Path) -> None:
    fix = BucketFix()
    fix.add({"conns": [900, 40], "topics": {"id-1": "orders"}})
    fix.add({"conns": [7], "topics": {}})
    fix.rank()
    assert fix.ids == {7: 1, 40: 2, 900: 3}
    source, target = tmp_path / "part.parquet", tmp_path / "out" / "date=2026-11-22" / "part-00000.parquet"
    rows = [{"capture": "c", "conn_id": 900, "topic": None, "topic_id": "id-1", "partition": 0}]
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMAS["partitions"]), source)
    assert list(fix_files(fix, [("partitions", str(source), str(target))])) == [str(target)]
    got = pq.read_table(target).to_pylist()
    assert [(r["conn_id"], r["topic"], r["topic_id"]) for r in got] == [(3, "orders", "id-1")]


def test_a_capture_without_a_date_is_in_the_null_partition(tmp_path: Path) -> None:
    rows = [
        {"capture": "ok.pcap", "status": "ok", "date": "2026-11-22"},
        {"capture": "notes.pcap", "status": "failed", "date": None},
    ]
    write_captures(rows, tmp_path)
    names = sorted(p.parent.name for p in (tmp_path / "captures").rglob("*.parquet"))
    assert names == ["date=2026-11-22", "date=__HIVE_DEFAULT_PARTITION__"]
    table = ds.dataset(tmp_path / "captures", partitioning="hive").to_table()
    assert sorted(zip(table["capture"].to_pylist(), table["status"].to_pylist(), strict=True)) == [
        ("notes.pcap", "failed"),
        ("ok.pcap", "ok"),
    ]
