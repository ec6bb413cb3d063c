"""Rows of the kwsniff tables from decoded exchanges (plain Python values; Arrow lives in tables)."""

from kwsniff.rows.builder import ExchangeRows, ListSink, RowSink, TableBuilder
from kwsniff.rows.partitions import RecordOptions

__all__ = ["ExchangeRows", "ListSink", "RecordOptions", "RowSink", "TableBuilder"]
