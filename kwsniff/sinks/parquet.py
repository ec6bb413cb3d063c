"""Rows to Parquet datasets `OUT/<table>/<capture>.parquet`, written in bounded record batches."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from kwsniff.tables import SCHEMAS

# Rows held per table before they are written out as one record batch (bounded memory).
BATCH_ROWS = 50_000


class ParquetSink:
    """One Parquet file per table for one capture; every table gets a file, empty or not, so a
    dataset directory always exists and reads with the full schema."""

    def __init__(self, out_dir: str | Path, capture: str) -> None:
        self.out_dir = Path(out_dir)
        self.stem = re.sub(r"[^A-Za-z0-9._-]+", "_", capture) or "capture"
        self.rows: dict[str, list[dict[str, Any]]] = {t: [] for t in SCHEMAS}
        self.writers: dict[str, pq.ParquetWriter] = {}
        self.counts: dict[str, int] = dict.fromkeys(SCHEMAS, 0)

    def add(self, table: str, row: dict[str, Any]) -> None:
        rows = self.rows[table]
        rows.append(row)
        if len(rows) >= BATCH_ROWS:
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

    def close(self) -> None:
        for table in SCHEMAS:
            self._flush(table)
            self._writer(table).close()
        self.writers.clear()
