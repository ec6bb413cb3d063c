"""Rows to Arrow record batches held in memory, for the Python API (kwsniff.api): no files.

The batches are cut exactly where :class:`ParquetSink` cuts its row groups (the same row buffer
under the same memory budget), so writing them one row group each gives the bytes `read --out` writes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa

from kwsniff.sinks.parquet import ROW_BUFFER_BYTES, ParquetSink
from kwsniff.tables import DEFAULT_TABLES


class ArrowSink(ParquetSink):
    """Filled batches wait in :attr:`ready` as (table, batch), in the order they filled, until the
    owner takes them; :meth:`close` adds what the row buffers still hold."""

    def __init__(
        self, name: str, tables: Iterable[str] = DEFAULT_TABLES, *, row_buffer_bytes: int = ROW_BUFFER_BYTES
    ) -> None:
        super().__init__(".", name, tables, row_buffer_bytes=row_buffer_bytes)
        self.ready: deque[tuple[str, pa.RecordBatch]] = deque()

    def write_batch(self, table: str, batch: pa.RecordBatch) -> None:
        self.ready.append((table, batch))

    def close(self) -> dict[str, Path]:
        for table in self.tables:
            self._flush(table)
        return {}

    def abort(self) -> None:
        self.ready.clear()
        for rows in self.rows.values():
            rows.clear()
