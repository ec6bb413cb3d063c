"""Where rows go: Parquet datasets (and later Spark). The only layer that writes files."""

from kwsniff.sinks.dataset import (
    ExistingOutput,
    Output,
    OutputError,
    capture_keys,
    output_name,
    stream_name,
)
from kwsniff.sinks.parquet import ParquetSink

__all__ = [
    "ExistingOutput",
    "Output",
    "OutputError",
    "ParquetSink",
    "capture_keys",
    "output_name",
    "stream_name",
]
