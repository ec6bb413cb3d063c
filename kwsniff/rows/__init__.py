"""Rows of the kwsniff tables from decoded exchanges (plain Python values; Arrow lives in tables)."""

from kwsniff.rows.builder import DIRECTION_BYTES, DIRECTIONS, ExchangeRows, ListSink, RowSink, TableBuilder
from kwsniff.rows.partitions import RecordOptions

__all__ = [
    "DIRECTIONS",
    "DIRECTION_BYTES",
    "ExchangeRows",
    "ListSink",
    "RecordOptions",
    "RowSink",
    "TableBuilder",
]
