"""The `records` table (opt-in, `--records`): one row per record of a Produce request or Fetch response."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kwsniff.defaults import INT64_MAX
from kwsniff.records import RecordInfo


def record_rows(
    context: dict[str, Any],
    part: dict[str, Any],
    infos: list[RecordInfo],
    first_offset: int | None,
    *,
    assign: bool,
) -> list[dict[str, Any]]:
    """Rows for the records of one topic-partition.

    ``assign``: the offsets are the broker's to give (a Produce request): record n gets
    ``first_offset + n``, or no offset when ``first_offset`` is None. Otherwise (Fetch) the records
    carry their log offsets. Timestamps become UTC microseconds like every kwsniff timestamp;
    magic 0 messages have none.
    """
    head = {
        **context,
        "topic": part.get("topic"),
        "topic_id": part.get("topic_id"),
        "partition": part["partition"],
    }
    offsets: Iterable[int | None]
    if not assign:
        offsets = [r.offset for r in infos]
    elif first_offset is None:
        offsets = [None] * len(infos)
    elif first_offset + len(infos) - 1 <= INT64_MAX:
        offsets = range(first_offset, first_offset + len(infos))
    else:
        # The broker's offsets past int64 (a base offset near 2^63) are none: the caller counts them.
        offsets = [o if o <= INT64_MAX else None for o in range(first_offset, first_offset + len(infos))]
    rows: list[dict[str, Any]] = []
    append = rows.append
    for r, offset in zip(infos, offsets, strict=True):
        ts = r.timestamp
        append(
            {
                **head,
                "offset": offset,
                "timestamp": ts * 1000 if ts >= 0 and r.timestamp_type != "none" else None,
                "timestamp_type": r.timestamp_type,
                "key_size": r.key_size,
                "value_size": r.value_size,
                "header_count": r.header_count,
                "producer_id": r.producer_id,
                "producer_epoch": r.producer_epoch,
                "sequence": r.sequence,
                "compression": r.compression,
                "is_control": r.is_control,
                "key": r.key,
                "value": r.value,
            }
        )
    return rows
