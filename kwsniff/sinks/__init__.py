"""Where rows go: Parquet datasets (and later Spark). The only layer that writes files."""

from kwsniff.sinks.dataset import (
    ExistingOutput,
    Output,
    OutputError,
    capture_keys,
    output_name,
    stream_name,
)
from kwsniff.sinks.parquet import ParquetSink, arrow_without_pandas

__all__ = [
    "ExistingOutput",
    "Output",
    "OutputError",
    "ParquetSink",
    "arrow_without_pandas",
    "capture_keys",
    "output_name",
    "stream_name",
]
