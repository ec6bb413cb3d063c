"""The `partitions` table: one row per topic-partition per exchange, request and response merged.

Decoded messages are plain dicts with the spec's snake_case names (DESIGN.md "The schema set"), and
the per-partition APIs share a few shapes: a list of topics (`name`/`topic` and/or `topic_id`), each
with a list of partition structs (`partition_index`/`partition`/`index`/`partition_id`) or a list of
partition numbers (`partition_indexes`, `partitions`), sometimes under a list of groups or
transactions. Walking by those names covers every per-partition API; what differs per API is which
field means what, and that is the short table of renames below.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kwsniff.defaults import INT64_MAX, INT64_MIN
from kwsniff.memory import NAMES, TOPIC_NAME_COST, MemoryBudget
from kwsniff.protocol import error_name, magic_removed_in, message_fields
from kwsniff.protocol.partial import CutRecords
from kwsniff.records import RecordInfo, counts_from_headers, counts_v2, summarize_records
from kwsniff.rows.fact_compiler import compile_partition_walker
from kwsniff.rows.records import record_rows

PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
CREATE_TOPICS, DELETE_RECORDS, OFFSET_FOR_LEADER_EPOCH = 19, 21, 23
DESCRIBE_TOPIC_PARTITIONS = 75
VOTE, ALTER_PARTITION = 52, 56
REQUEST, RESPONSE = 0, 1
# Responses that name topic ids (KIP-516): Metadata v10+, CreateTopics v7+, DescribeTopicPartitions.
TOPIC_ID_SOURCES = frozenset({METADATA, CREATE_TOPICS, DESCRIBE_TOPIC_PARTITIONS})
# Group-membership APIs list partitions as assignments of members, not as partitions the exchange
# acts on (they belong to a groups table).
_NOT_PARTITION_APIS = frozenset({68, 69, 76, 77, 88, 89})

# Per-partition fields the table carries: spec name -> column.
_FIELDS: dict[str, str | None] = {
    "error_code": "error_code",
    "fetch_offset": "fetch_offset",
    "base_offset": "base_offset",
    "high_watermark": "high_watermark",
    "last_stable_offset": "last_stable_offset",
    "log_start_offset": "log_start_offset",
    "committed_offset": "committed_offset",
    "offset": "offset",
    "timestamp": "timestamp",
    "leader_id": "leader_id",
    "leader_epoch": "leader_epoch",
    "committed_leader_epoch": "leader_epoch",
}
# Where a field means something else in one API and side; None drops it.
_RENAMES: dict[tuple[int, int], dict[str, str | None]] = {
    # A Fetch request's log_start_offset is the follower's own (consumers send -1), not the log's.
    (FETCH, REQUEST): {**_FIELDS, "log_start_offset": None},
    # A ListOffsets request's timestamp is the query (-1 latest, -2 earliest, -3 max timestamp, KIP-734).
    (LIST_OFFSETS, REQUEST): {**_FIELDS, "timestamp": "target_timestamp"},
    # DeleteRecords answers with the partition's new log start offset.
    (DELETE_RECORDS, RESPONSE): {**_FIELDS, "low_watermark": "log_start_offset"},
    (OFFSET_FOR_LEADER_EPOCH, RESPONSE): {**_FIELDS, "end_offset": "offset"},
    # KRaft (docs/tables.md "KRaft and ISR changes"): the leader and epoch a metadata-log Fetch
    # response names, a Vote's answer, the ISR a partition leader asks for and the one the
    # controller committed, with the partition epoch (KIP-497, KIP-595, KIP-903).
    (FETCH, RESPONSE): {**_FIELDS, "current_leader": "leader_id"},
    (VOTE, RESPONSE): {**_FIELDS, "vote_granted": "vote_granted"},
    (ALTER_PARTITION, REQUEST): {
        **_FIELDS,
        "new_isr": "new_isr",
        "new_isr_with_epochs": "new_isr",
        "partition_epoch": "partition_epoch",
    },
    (ALTER_PARTITION, RESPONSE): {**_FIELDS, "isr": "isr", "partition_epoch": "partition_epoch"},
}
_RECORD_FACTS = ("record_count", "record_bytes", "batch_count", "compression")
# A row's count of values left null because they were past int64 (kwsniff.defaults.PAST_INT64): a
# key no table has, which the row builder takes off and adds to the capture's notes.
PAST_INT64_KEY = "_past_int64"


@dataclass(frozen=True, slots=True)
class RecordOptions:
    """How records fields are read: counts only, or one entry per record (decompressing)."""

    records: bool = False
    payloads: bool = False
    max_decompressed: int = 64 * 1024 * 1024
    budget: MemoryBudget | None = None  # the run's memory budget; its records pool bounds records


COUNTS_ONLY = RecordOptions()

PartKey = tuple[Any, Any, int]  # (group or transaction, topic id or name, partition)


def partition_facts(
    api_key: int, api_version: int, side: int, msg: dict[str, Any], options: RecordOptions = COUNTS_ONLY
) -> dict[PartKey, dict[str, Any]]:
    """Every topic-partition one side of an exchange names, with its facts under column names, read by
    the code compiled for that message version (kwsniff.rows.fact_compiler)."""
    if api_key in _NOT_PARTITION_APIS:
        return {}
    out: dict[PartKey, dict[str, Any]] = {}
    walk = _walkers.get((api_key, api_version, side), _MISSING)
    if walk is _MISSING:
        walk = _compile_walker(api_key, api_version, side)
    if walk is not None:
        walk(msg, out, options)
    return out


_MISSING: Any = object()
_walkers: dict[tuple[int, int, int], Any] = {}


def _compile_walker(api_key: int, api_version: int, side: int) -> Any:
    fields = message_fields(api_key, api_version, side == RESPONSE)
    label = f"{api_key} v{api_version} {'response' if side == RESPONSE else 'request'}"
    renames = _RENAMES.get((api_key, side), _FIELDS)
    walk = compile_partition_walker(fields, renames, api_key == LIST_OFFSETS, _record_facts, api_key, label)
    _walkers[(api_key, api_version, side)] = walk
    return walk


def _record_facts(facts: dict[str, Any], data: Any, api_key: int, options: RecordOptions) -> None:
    if isinstance(data, CutRecords):
        # A snap length cut the records: counted from the batch headers when all were kept, else
        # unknown (not 0).
        facts.update(_CUT_RECORDS if api_key == PRODUCE else _CUT_RECORDS_OFFSETS)
        if options.records:
            facts["_records"] = []
        counts = counts_from_headers(data.kept, data.size) if data.size >= 0 else None
        if counts is not None:
            count, size, batches, codec, _, _, control, first, last = counts
            facts.update(
                record_count=count, record_bytes=size, batch_count=batches, compression=codec or None
            )
            # The chain of headers ends where the field does: no batch is partial.
            facts["control_batches"], facts["partial_bytes"] = control, 0
            if api_key != PRODUCE:
                facts["first_offset"] = first
                facts["last_offset"] = last
                if last is None and first is not None:
                    facts[PAST_INT64_KEY] = 1
        return
    if not data:
        facts.update(_NO_RECORDS if api_key == PRODUCE else _NO_RECORDS_OFFSETS)
        if options.records:
            facts["_records"] = []
        return
    counts = None if options.records else counts_v2(data)
    if counts is not None:
        # The usual field, magic 2 batch headers only: the same facts without the general reader.
        count, size, batches, codec, crc_errors, partial, control, first, last = counts
        facts["record_count"] = count
        facts["record_bytes"] = size
        facts["batch_count"] = batches
        facts["compression"] = codec or None
        facts["crc_errors"] = crc_errors
        facts["partial_bytes"] = partial
        facts["control_batches"] = control
        facts["capped_batches"] = 0
        facts["record_errors"] = 0
        facts["record_error"] = None
        if api_key != PRODUCE:
            facts["first_offset"] = first
            facts["last_offset"] = last
            if last is None and first is not None:
                facts[PAST_INT64_KEY] = 1  # the last batch's baseOffset + lastOffsetDelta
        return
    s = summarize_records(
        data,
        want_records=options.records,
        want_payloads=options.payloads,
        max_decompressed=options.max_decompressed,
        budget=options.budget,
    )
    facts.update(
        record_count=s.record_count,
        record_bytes=s.record_bytes,
        batch_count=s.batch_count,
        compression=s.compression or None,
        crc_errors=s.crc_errors,
        partial_bytes=s.partial_bytes,
        control_batches=s.control_batches,
        capped_batches=s.capped_batches,
        record_errors=len(s.errors),
        record_error=s.errors[0] if s.errors else None,
    )
    if api_key != PRODUCE:
        # A Produce request's offsets are the producer's placeholders; the broker assigns them.
        facts["first_offset"] = s.base_offset
        facts["last_offset"] = s.last_offset
    else:
        # Kafka 4 brokers refuse produced message formats v0/v1 (KIP-724); a records field holds one
        # format (Produce v0-v2 carry magic 0/1, v3+ magic 2), so its first batch's magic tells.
        # Magic 2 sets mostly take the counts_v2 path above and have no removed_in either.
        release = magic_removed_in(s.magic)
        if release is not None:
            facts["removed_in"] = release
    if s.past_int64 and api_key != PRODUCE:
        # (A Produce request's offsets are the producer's placeholders, kept in no column.)
        facts[PAST_INT64_KEY] = s.past_int64
    if s.records is not None:
        facts["_records"] = s.records
        facts["_held"] = s.held_bytes  # released (kwsniff.memory) when the records are written


# The facts of an empty or null records field (a Fetch of a partition with nothing new).
_NO_RECORDS: dict[str, Any] = {
    "record_count": 0,
    "record_bytes": 0,
    "batch_count": 0,
    "compression": None,
    "crc_errors": 0,
    "partial_bytes": 0,
    "control_batches": 0,
    "capped_batches": 0,
    "record_errors": 0,
    "record_error": None,
}
_NO_RECORDS_OFFSETS = {**_NO_RECORDS, "first_offset": None, "last_offset": None}
# A records field a snap length cut: every count over it unknown (its CRCs, covering bytes not kept,
# are never checked), unless its batch headers give some.
_CUT_RECORDS: dict[str, Any] = dict.fromkeys(_NO_RECORDS)
_CUT_RECORDS_OFFSETS = {**_CUT_RECORDS, "first_offset": None, "last_offset": None}


def record_totals(info: dict[str, Any], parts: dict[PartKey, dict[str, Any]]) -> None:
    """`requests.record_count` / `record_bytes`: sums over the partitions that carry records."""
    counts = [p["record_count"] for p in parts.values() if "record_count" in p]
    if None in counts:
        # A partition's records were cut by a snap length: the request's total is unknown.
        info["record_count"] = info["record_bytes"] = None
    elif counts:
        info["record_count"] = sum(counts)
        info["record_bytes"] = sum(p["record_bytes"] for p in parts.values() if "record_bytes" in p)


def topic_ids(msg: dict[str, Any]) -> dict[str, str]:
    """Topic id -> name from a response that lists both."""
    return {
        str(t["topic_id"]): t["name"]
        for t in msg.get("topics") or ()
        if t.get("topic_id") and t.get("name") and getattr(t["topic_id"], "int", 1) != 0
    }


def merged_rows(
    api_key: int, reqi: dict[str, Any], respi: dict[str, Any], context: dict[str, Any]
) -> Iterator[dict[str, Any]]:
    """`partitions` rows: ``context`` (the exchange's ids) and the request and response facts of each
    topic-partition, merged.

    Produce counts come from the request (what the producer sent), Fetch counts from the response
    (what the consumer received): only the side with a records field has them. A row keeps its
    records (``_records``, when --records asked for them) for :func:`records_of`."""
    req_parts: dict[PartKey, dict[str, Any]] = reqi.get("partitions") or {}
    resp_parts: dict[PartKey, dict[str, Any]] = respi.get("partitions") or {}
    group = reqi.get("group_id")
    member_epoch = reqi.get("member_epoch")
    produce = api_key == PRODUCE
    none: dict[str, Any] = {}
    for key in dict.fromkeys([*req_parts, *resp_parts]) if resp_parts else req_parts:
        req, resp = req_parts.get(key, none), resp_parts.get(key, none)
        row = {**context, **req, **resp}
        if PAST_INT64_KEY in req and PAST_INT64_KEY in resp:  # both sides' (a ShareFetch's)
            row[PAST_INT64_KEY] = req[PAST_INT64_KEY] + resp[PAST_INT64_KEY]
        if group is not None and "group_id" not in row:
            row["group_id"] = group  # OffsetCommit/OffsetFetch v0-7 responses do not repeat it
        if member_epoch is not None:
            row["member_epoch"] = member_epoch
        if produce and "record_count" in row:
            base = row.get("base_offset")
            if row.get("error_code") == 0 and base is not None and base >= 0:
                row["first_offset"] = base
                row["last_offset"] = (
                    _derived(row, base + row["record_count"] - 1) if row["record_count"] else None
                )
        if "high_watermark" in row and "fetch_offset" in row:
            hwm, position = row["high_watermark"], row["fetch_offset"]
            row["lag"] = None if hwm is None or position is None else _derived(row, hwm - position)
        code = row.get("error_code")
        row["error_name"] = None if code is None else _ERROR_NAMES.get(code) or error_name(code)
        yield row


_ERROR_NAMES = {0: "NONE"}


def _derived(row: dict[str, Any], value: int) -> int | None:
    """A column computed from wire ints (a Produce's last offset, a Fetch's lag): None, counted in
    the row's PAST_INT64_KEY, where it is past int64 (a base offset of 2^63-1 and two records, a
    high watermark of 2^62 over a fetch offset of -2^62)."""
    if INT64_MIN <= value <= INT64_MAX:
        return value
    row[PAST_INT64_KEY] = row.get(PAST_INT64_KEY, 0) + 1
    return None


def records_of(api_key: int, row: dict[str, Any], context: dict[str, Any]) -> list[dict[str, Any]]:
    """The `records` rows of one merged partitions row (empty unless --records)."""
    infos: list[RecordInfo] | None = row.pop("_records", None)
    if not infos:
        return []
    first: int | None = None
    if api_key == PRODUCE:
        # The broker assigns a Produce request's records consecutive offsets from base_offset, in
        # the order sent; only when every record could be read is the n-th one's offset known.
        if row.get("first_offset") is not None and len(infos) == row.get("record_count"):
            first = row["first_offset"]
        rows = record_rows(context, row, infos, first, assign=True)
        if first is not None and first + len(infos) - 1 > INT64_MAX:
            row[PAST_INT64_KEY] = row.get(PAST_INT64_KEY, 0) + first + len(infos) - 1 - INT64_MAX
        return rows
    return record_rows(context, row, infos, None, assign=False)


# -- topic ids -------------------------------------------------------------------------------------
MAX_HELD_ROWS = 100_000


def _name_cost(topic_id: str, name: str) -> int:
    """What one known name costs in the names pool: both strings (a name of non-ASCII characters
    takes up to 4 bytes each) and their dict entry."""
    return sys.getsizeof(topic_id) + sys.getsizeof(name) + TOPIC_NAME_COST


class TopicNames:
    """Topic ids to names for one capture, and the rows waiting for a name.

    Names come from responses seen on any connection; a row whose id is not known yet is held until
    a later response names it or the capture ends (bounded: past ``max_held`` rows, rows are written
    with the id only and counted as ``held_overflow``). The names are charged to the budget's names
    pool: past its cap the names learned longest ago are forgotten and counted (``evicted``), and a
    later row of a forgotten id is written with its id only, unless a response names it again
    (docs/memory.md)."""

    def __init__(self, sink: Any, max_held: int = MAX_HELD_ROWS, budget: MemoryBudget | None = None) -> None:
        self.sink = sink
        self.names: dict[Any, str] = {}
        self.held: list[tuple[str, dict[str, Any]]] = []
        self.max_held = max_held
        self.held_overflow = 0
        self.unresolved = 0
        # Rows naming several topic ids (a group member's assignment): (table, row, ids, spell).
        self.spelling: list[tuple[str, dict[str, Any], set[str], Any]] = []
        self.pool = budget.cell(NAMES) if budget is not None else [0]
        self.cap = budget.cap(NAMES) if budget is not None else None
        self.held_bytes = 0  # what this map charged to the pool
        self.evicted = 0  # names forgotten to stay under the cap
        self.evicted_bytes = 0
        # The names learned or changed since :meth:`take_fresh`, when a reader takes them (a live
        # worker shares them with the others, kwsniff.pipeline.live_worker); None: not gathered.
        self.fresh: dict[Any, str] | None = None

    def learn(self, ids: dict[str, str]) -> None:
        names = self.names
        if not ids or all(names.get(k) == v for k, v in ids.items()):
            return
        charged, fresh = 0, self.fresh
        for k, v in ids.items():
            old = names.pop(k, None)  # pop: named again, it is the newest and the last to go
            if old is not None:
                charged -= _name_cost(k, old)
            names[k] = v
            charged += _name_cost(k, v)
            if fresh is not None and old != v:
                fresh[k] = v
        self.held_bytes += charged
        self.pool[0] += charged
        if self.cap is not None and self.held_bytes > self.cap:
            self._evict(self.cap)
        if self.held:
            waiting = []
            for table, row in self.held:
                name = names.get(row["topic_id"])
                if name is None:
                    waiting.append((table, row))
                else:
                    row["topic"] = name
                    self.sink.add(table, row)
            self.held = waiting
        if self.spelling:
            self.spelling = [entry for entry in self.spelling if not self._spelled(entry)]

    def take_fresh(self) -> list[tuple[Any, str]]:
        """The (id, name) pairs learned or changed since the last call; at the first, every name
        known (and from then on the new ones are gathered for the next)."""
        fresh, self.fresh = (self.names if self.fresh is None else self.fresh), {}
        return list(fresh.items())

    def _evict(self, cap: int) -> None:
        """The oldest names go until the map holds 7/8 of ``cap`` (one scan, not one per name)."""
        names = self.names
        target = cap - cap // 8
        victims, freed = [], 0
        for k, v in names.items():
            if self.held_bytes - freed <= target:
                break
            victims.append(k)
            freed += _name_cost(k, v)
        for k in victims:
            del names[k]
        self.held_bytes -= freed
        self.pool[0] -= freed
        self.evicted += len(victims)
        self.evicted_bytes += freed

    def release(self) -> None:
        """The capture is over: what the map charged goes back to the pool."""
        self.pool[0] -= self.held_bytes
        self.held_bytes = 0

    def add_spelled(self, table: str, row: dict[str, Any], ids: set[str], spell: Any) -> None:
        """Write a row that names several topic ids once every id has a name: ``spell(row, names)``
        writes the names in. Held like single-id rows, under the same bound."""
        entry = (table, row, ids, spell)
        if self._spelled(entry):
            return
        if len(self.held) + len(self.spelling) < self.max_held:
            self.spelling.append(entry)
            return
        self.held_overflow += 1
        spell(row, self.names)
        self.sink.add(table, row)

    def _spelled(self, entry: tuple[str, dict[str, Any], set[str], Any]) -> bool:
        table, row, ids, spell = entry
        names = self.names
        if any(i not in names for i in ids):
            return False
        spell(row, names)
        self.sink.add(table, row)
        return True

    def add_row(self, table: str, row: dict[str, Any]) -> None:
        """Write one row, naming its topic first when only its id is known."""
        if row.get("topic") is None and row.get("topic_id") is not None:
            self.add(table, [row], None, row["topic_id"])
        else:
            self.sink.add(table, row)

    def add(self, table: str, rows: list[dict[str, Any]], topic: str | None, topic_id: str | None) -> None:
        """Write rows of one topic, naming it first when only its id is known."""
        if topic is None and topic_id is not None:
            topic = self.names.get(topic_id)
            if topic is None:
                room = self.max_held - len(self.held)
                self.held.extend((table, row) for row in rows[:room])
                if len(rows) <= room:
                    return
                self.held_overflow += len(rows) - room
                rows = rows[room:]
            else:
                for row in rows:
                    row["topic"] = topic
        add = self.sink.add
        for row in rows:
            add(table, row)

    def finish(self) -> None:
        """End of capture: the second pass over held rows, then write them named or not."""
        names = self.names
        for table, row in self.held:
            name = names.get(row["topic_id"])
            if name is None:
                self.unresolved += 1
            row["topic"] = name
            self.sink.add(table, row)
        self.held = []
        for table, row, ids, spell in self.spelling:
            self.unresolved += any(i not in names for i in ids)
            spell(row, names)
            self.sink.add(table, row)
        self.spelling = []
