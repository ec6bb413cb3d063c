"""The partition states the KRaft metadata log's records carry, as `partitions` rows.

Every broker and controller fetches the metadata log `__cluster_metadata` (KIP-500, KIP-595); its
records' values are metadata records (KIP-631). PartitionRecord (a partition's whole state: topic
creation, snapshots) and PartitionChangeRecord (what changed, e.g. the ISR an AlterPartition made
the controller commit) name the partition and, when it changed, its ISR: one row each, so an ISR
shrink or expansion is on the wire even where the AlterPartition itself was not captured.
"""

from __future__ import annotations

from typing import Any

from kwsniff.protocol import DecodeError, decode_metadata_record
from kwsniff.protocol.partial import CutRecords
from kwsniff.records import summarize_records
from kwsniff.rows.partitions import PAST_INT64_KEY, RecordOptions

PARTITION_RECORD = "PartitionRecord"
NO_CHANGE = -2  # PartitionChangeRecord's Leader: -2 the leader did not change, -1 there is none


def metadata_log_rows(msg: dict[str, Any], info: dict[str, Any], options: RecordOptions) -> None:
    """Add to a metadata-log Fetch response's ``info["partitions"]`` one entry per PartitionRecord or
    PartitionChangeRecord that sets an ISR: the partition it names, `isr`, the leader (when set),
    the leader and partition epochs (PartitionRecord's; a change bumps them without saying), and the
    record's log `offset`. Values that are not metadata records are skipped (counted nowhere: they
    are not the exchange's own facts)."""
    parts: dict[Any, dict[str, Any]] = info.setdefault("partitions", {})
    for topic in msg.get("responses") or ():
        for part in topic.get("partitions") or ():
            data = part.get("records")
            if not data or isinstance(data, CutRecords):
                continue
            # Payloads are read and dropped here, one records field at a time (its frame's bytes).
            summary = summarize_records(
                data, want_records=True, want_payloads=True, max_decompressed=options.max_decompressed
            )
            for record in summary.records or ():
                row = _row(record.value, record.offset) if not record.is_control else None
                if row is not None:
                    at: object = record.offset
                    if at is None:  # past int64 (counted): the record's place in the response keys it
                        row[PAST_INT64_KEY] = 1
                        at = f"#{len(parts)}"
                    parts[(f"metadata@{at}", row["topic_id"], row["partition"])] = row


def _row(value: bytes | None, offset: int | None) -> dict[str, Any] | None:
    if value is None:
        return None
    try:
        decoded = decode_metadata_record(value)
    except DecodeError:
        return None
    if decoded is None:
        return None
    name, record = decoded
    isr = record.get("isr")
    if isr is None:  # a change that left the ISR as it was
        return None
    row: dict[str, Any] = {
        "topic_id": str(record["topic_id"]),
        "partition": record["partition_id"],
        "isr": ",".join(map(str, isr)),
        "offset": offset,
    }
    if record.get("leader", NO_CHANGE) != NO_CHANGE:
        row["leader_id"] = record["leader"]
    if name == PARTITION_RECORD:
        row["leader_epoch"] = record["leader_epoch"]
        row["partition_epoch"] = record["partition_epoch"]
    return row
