"""What reading a records field yields: a per-set summary and, on request, one entry per record."""

from __future__ import annotations

from dataclasses import dataclass, field

# Attribute bits 0-2 of a batch (magic 2) or message (magic 0/1) name the codec; Kafka defines ids 0-4
# (zstd, id 4, only from magic 2 on: KIP-110).
CODEC_NAMES: tuple[str, ...] = ("none", "gzip", "snappy", "lz4", "zstd")
UNKNOWN_CODEC = "unknown"


def codec_name(codec_id: int) -> str:
    return CODEC_NAMES[codec_id] if codec_id < len(CODEC_NAMES) else UNKNOWN_CODEC


@dataclass(slots=True)
class RecordInfo:
    """One record, with sizes always and key/value bytes only when payloads were asked for."""

    offset: int | None  # None: past int64 (a base offset near 2^63 plus the record's delta)
    timestamp: int
    timestamp_type: str  # "create" | "log_append" | "none" (magic 0 has no timestamp)
    key_size: int  # -1 for a null key
    value_size: int  # -1 for a null value
    header_count: int
    producer_id: int  # -1 for magic 0/1
    producer_epoch: int
    sequence: int
    compression: str
    is_control: bool
    key: bytes | None = None
    value: bytes | None = None


@dataclass(slots=True)
class RecordSetSummary:
    """Counts and producer facts of one records field, read without raising whatever the bytes hold."""

    record_count: int = 0
    record_bytes: int = 0
    batch_count: int = 0
    compression: str = ""  # "none" | "gzip" | "snappy" | "lz4" | "zstd" | "unknown" | "mixed" | "" (empty)
    magic: int | None = None
    crc_errors: int = 0
    base_offset: int | None = None
    last_offset: int | None = None
    partial_bytes: int = 0
    control_batches: int = 0
    transactional: bool = False
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    capped_batches: int = 0  # over --max-decompressed, or past the memory budget's records share
    past_int64: int = 0  # offsets (last_offset, record offsets) past int64, left None
    held_bytes: int = 0  # charged to the memory budget's records pool for ``records`` (kwsniff.memory)
    errors: list[str] = field(default_factory=list)
    records: list[RecordInfo] | None = None
