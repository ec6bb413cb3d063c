"""Where rows go: Parquet datasets (and later Spark). The only layer that writes files."""

from kwsniff.sinks.parquet import ParquetSink

__all__ = ["ParquetSink"]
