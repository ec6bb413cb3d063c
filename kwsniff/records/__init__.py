"""Kafka record data: record batches (magic 2) and legacy message sets (magic 0/1), every codec.

No I/O: bytes of a Produce request's or Fetch response's records field in, a RecordSetSummary out.
"""

from kwsniff.records._model import RecordInfo, RecordSetSummary
from kwsniff.records._summarize import counts_from_headers, counts_v2, summarize_records

__all__ = ["RecordInfo", "RecordSetSummary", "counts_from_headers", "counts_v2", "summarize_records"]
