"""Rows to Parquet datasets `OUT/<table>/<capture>.parquet`, written in bounded record batches."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from kwsniff.tables import DEFAULT_TABLES, SCHEMAS

# Rows held per table before they are written out as one record batch (bounded memory).
BATCH_ROWS = 50_000
# The records table has many rows and, with --record-payloads, their keys and values: smaller batches,
# and a batch is also written once the payloads it holds reach BATCH_PAYLOAD_BYTES.
BATCH_ROWS_BY_TABLE = {"records": 10_000, "partitions": 10_000}
BATCH_PAYLOAD_BYTES = 64 * 1024 * 1024


class ParquetSink:
    """One Parquet file per table for one capture; every table gets a file, empty or not, so a
    dataset directory always exists and reads with the full schema. Opt-in tables (``records``) are
    written only when named in ``tables``."""

    def __init__(self, out_dir: str | Path, capture: str, tables: Iterable[str] = DEFAULT_TABLES) -> None:
        self.out_dir = Path(out_dir)
        self.stem = re.sub(r"[^A-Za-z0-9._-]+", "_", capture) or "capture"
        self.tables = tuple(tables)
        self.rows: dict[str, list[dict[str, Any]]] = {t: [] for t in self.tables}
        self.limits = {t: BATCH_ROWS_BY_TABLE.get(t, BATCH_ROWS) for t in self.tables}
        self.payload_bytes = 0
        self.writers: dict[str, pq.ParquetWriter] = {}
        self.counts: dict[str, int] = dict.fromkeys(self.tables, 0)

    def add(self, table: str, row: dict[str, Any]) -> None:
        rows = self.rows[table]
        rows.append(row)
        if len(rows) >= self.limits[table]:
            self._flush(table)
        elif table == "records" and row["value"] is not None:
            self.payload_bytes += len(row["value"]) + len(row["key"] or b"")
            if self.payload_bytes >= BATCH_PAYLOAD_BYTES:
                self._flush(table)

    def _writer(self, table: str) -> pq.ParquetWriter:
        writer = self.writers.get(table)
        if writer is None:
            path = self.out_dir / table / f"{self.stem}.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            writer = pq.ParquetWriter(path, SCHEMAS[table], compression="zstd")
            self.writers[table] = writer
        return writer

    def _flush(self, table: str) -> None:
        rows = self.rows[table]
        if rows:
            self._writer(table).write_batch(pa.RecordBatch.from_pylist(rows, schema=SCHEMAS[table]))
            self.counts[table] += len(rows)
            rows.clear()
            if table == "records":
                self.payload_bytes = 0

    def close(self) -> None:
        for table in self.tables:
            self._flush(table)
            self._writer(table).close()
        self.writers.clear()
