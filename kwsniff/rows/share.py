"""Share-group delivery facts (KIP-932) on the `partitions` rows of ShareFetch and ShareAcknowledge.

A share consumer does not own partitions: the broker lends it records. A ShareFetch (78) response
lists per partition the offsets it acquired for the member (`acquired_records`: FirstOffset,
LastOffset and DeliveryCount, the times the offsets were handed out) and, from v1, the lock
duration for the whole response (`acquisition_lock_timeout_ms`): offsets not acknowledged in time go
back to the pool and are delivered again. ShareFetch and ShareAcknowledge (79) requests give
offsets back as `acknowledgement_batches` (FirstOffset, LastOffset, AcknowledgeTypes): one type for
the whole batch, or one per offset; 0 gap (no record there: a compacted or control offset),
1 accept, 2 release (deliver again), 3 reject (never deliver again). No I/O, no pyarrow.
"""

from __future__ import annotations

from typing import Any

from kwsniff.defaults import int64_or_none
from kwsniff.rows.partitions import PAST_INT64_KEY

SHARE_FETCH, SHARE_ACKNOWLEDGE = 78, 79
SHARE_APIS = frozenset({SHARE_FETCH, SHARE_ACKNOWLEDGE})
# AcknowledgeTypes values (ShareFetchRequest.json, ShareAcknowledgeRequest.json) -> column.
_ACK_COLUMNS = {1: "accepted_records", 2: "released_records", 3: "rejected_records"}
_NO_ACKS = {"accepted_records": 0, "released_records": 0, "rejected_records": 0}
_NO_ACQUIRED = {"acquired_records": 0, "redelivered_records": 0}


def acknowledgements(msg: dict[str, Any], parts: dict[Any, dict[str, Any]]) -> None:
    """Add to ``parts`` (the request's partitions, keyed as kwsniff.rows.partitions keys them) the
    offsets each acknowledges, counted per type, and the range they span."""
    for topic, part in _partitions(msg.get("topics")):
        facts = parts.get((None, topic, part.get("partition_index")))
        if facts is None:
            continue
        facts.update(_NO_ACKS)
        first = last = None
        for batch in part.get("acknowledgement_batches") or ():
            lo, hi, types = (
                batch.get("first_offset"),
                batch.get("last_offset"),
                batch.get("acknowledge_types"),
            )
            if type(lo) is not int or type(hi) is not int or hi < lo or not types:
                continue  # a damaged or empty batch acknowledges nothing
            first = lo if first is None else min(first, lo)
            last = hi if last is None else max(last, hi)
            if len(types) == 1:
                column = _ACK_COLUMNS.get(types[0])
                if column is not None:
                    facts[column] += hi - lo + 1
                continue
            for ack in types[: hi - lo + 1]:  # one type per offset of the batch
                column = _ACK_COLUMNS.get(ack)
                if column is not None:
                    facts[column] += 1
        facts["acknowledged_first_offset"] = first
        facts["acknowledged_last_offset"] = last
        _counts_in_int64(facts, _NO_ACKS)


def acquisitions(msg: dict[str, Any], parts: dict[Any, dict[str, Any]]) -> None:
    """Add to ``parts`` (a ShareFetch response's partitions) the offsets acquired for the member:
    how many, how many of them delivered before (DeliveryCount > 1), the highest delivery count,
    the range they span and the lock timeout (v1+; null in v0, whose brokers did not say)."""
    timeout = msg.get("acquisition_lock_timeout_ms")
    for topic, part in _partitions(msg.get("responses")):
        facts = parts.get((None, topic, part.get("partition_index")))
        if facts is None:
            continue
        facts.update(_NO_ACQUIRED)
        facts["acquisition_lock_timeout_ms"] = timeout
        first = last = top = None
        for acquired in part.get("acquired_records") or ():
            lo, hi, count = (
                acquired.get("first_offset"),
                acquired.get("last_offset"),
                acquired.get("delivery_count"),
            )
            if type(lo) is not int or type(hi) is not int or hi < lo:
                continue
            n = hi - lo + 1
            facts["acquired_records"] += n
            if type(count) is int:
                top = count if top is None else max(top, count)
                if count > 1:
                    facts["redelivered_records"] += n
            first = lo if first is None else min(first, lo)
            last = hi if last is None else max(last, hi)
        facts["acquired_first_offset"] = first
        facts["acquired_last_offset"] = last
        facts["max_delivery_count"] = top
        _counts_in_int64(facts, _NO_ACQUIRED)


def _counts_in_int64(facts: dict[str, Any], columns: dict[str, int]) -> None:
    """Counts summed over ranges of int64 offsets (LastOffset - FirstOffset + 1 is up to 2^64) are
    None past int64, counted in the row's PAST_INT64_KEY (kwsniff.rows.partitions)."""
    for column in columns:
        if int64_or_none(facts[column]) is None:
            facts[column] = None
            facts[PAST_INT64_KEY] = facts.get(PAST_INT64_KEY, 0) + 1


def _partitions(topics: Any) -> Any:
    """(topic id, partition struct) of each partition of a share request's or response's topics."""
    for topic in topics or ():
        tid = topic.get("topic_id")
        if tid is None or getattr(tid, "int", 1) == 0:
            continue
        for part in topic.get("partitions") or ():
            yield str(tid), part
