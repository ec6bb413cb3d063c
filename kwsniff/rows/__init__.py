"""Rows of the kwsniff tables from decoded exchanges (plain Python values; Arrow lives in tables)."""

from kwsniff.rows.builder import ExchangeRows, ListSink, RowSink, TableBuilder

__all__ = ["ExchangeRows", "ListSink", "RowSink", "TableBuilder"]
