"""Where rows go: Parquet datasets (and later Spark). The only layer that writes files."""

from kwsniff.sinks.dataset import (
    ExistingOutput,
    OutputError,
    output_name,
    prepare_output,
    remove_empty_dirs,
)
from kwsniff.sinks.parquet import ParquetSink

__all__ = [
    "ExistingOutput",
    "OutputError",
    "ParquetSink",
    "output_name",
    "prepare_output",
    "remove_empty_dirs",
]
