"""State shared by the batch readers while one records field is read."""

from __future__ import annotations

from kwsniff.memory import RECORDS, MemoryBudget
from kwsniff.records._model import RecordInfo, RecordSetSummary


class Reading:
    """The caller's options plus the summary being filled; one per summarize_records call."""

    __slots__ = (
        "summary",
        "records",
        "want_payloads",
        "cap",
        "max_depth",
        "check_crc",
        "codecs_seen",
        "seen_v2",
        "budget",
    )

    def __init__(
        self,
        summary: RecordSetSummary,
        *,
        want_payloads: bool,
        cap: int,
        max_depth: int,
        check_crc: bool,
        budget: MemoryBudget | None = None,
    ) -> None:
        self.summary = summary
        # The list to append RecordInfo to, or None when the caller only wants counts.
        self.records: list[RecordInfo] | None = summary.records
        self.want_payloads = want_payloads
        self.cap = cap
        self.max_depth = max_depth
        self.check_crc = check_crc
        self.codecs_seen: set[str] = set()
        self.seen_v2 = False
        self.budget = budget

    def admit(self, nbytes: int) -> bool:
        """May the records about to be read take ``nbytes`` of the memory budget? If so they are
        charged to its records pool (and to the summary, which the caller releases later)."""
        budget = self.budget
        if budget is None:
            return True
        if not budget.admit_records(nbytes):
            return False
        self.summary.held_bytes += nbytes
        return True

    def refund(self, nbytes: int) -> None:
        """Give back a charge whose records were not kept."""
        budget = self.budget
        if budget is not None and nbytes:
            budget.frame_records -= nbytes
            budget.release(RECORDS, nbytes)
            self.summary.held_bytes -= nbytes

    def error(self, reason: str, batch_position: int) -> None:
        self.summary.errors.append(f"{reason} at offset {batch_position}")

    def count_offsets(self, first: int | None, last: int | None) -> None:
        summary = self.summary
        if summary.base_offset is None:
            summary.base_offset = first
        summary.last_offset = last
