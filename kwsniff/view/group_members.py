"""Members of KIP-848 groups live (`kwsniff_consumer_group_members`): a classic group's count comes
from its leader's JoinGroup response, which lists them (kwsniff.view.stats); a group of the consumer
protocol (ConsumerGroupHeartbeat, KIP-848), share groups (KIP-932) and streams groups (KIP-1071) have
no such list on the wire, only each member's own heartbeats. A member is counted from a heartbeat
answered without error until it leaves (member epoch -1 or -2), is fenced or unknown to the
coordinator, or is silent longer than the session timeout, judged on packet times.
"""

from __future__ import annotations

from typing import Any

HEARTBEAT_APIS = frozenset({68, 76, 88})  # ConsumerGroupHeartbeat, ShareGroupHeartbeat, StreamsGroupHeartbeat
# The brokers' default group.consumer.session.timeout.ms (KIP-848): a heartbeat carries none.
SESSION_TIMEOUT = 45 * 1_000_000  # µs
MAX_MEMBERS = 100_000  # members followed over every group; past it new ones are refused, counted
# What ends a member (docs/groups.md "Events"): leaving, a fenced epoch; UNKNOWN_MEMBER_ID (25).
_GONE = frozenset({"leave", "static_leave", "fenced"})
UNKNOWN_MEMBER_ID = 25
MEMBER_KEY = 64  # characters of a member id kept (a client may send any length): the count is all


def _key(member: str) -> str:
    return member if len(member) <= MEMBER_KEY else f"{member[:MEMBER_KEY]}#{hash(member):x}"


class HeartbeatMembers:
    """Feed it `groups` rows of HEARTBEAT_APIS; :meth:`take_changed` gives (group, members, µs) of
    every group whose count changed, at the packet time it changed."""

    def __init__(self, max_members: int = MAX_MEMBERS, timeout: int = SESSION_TIMEOUT) -> None:
        self.max_members = max_members
        self.timeout = timeout
        self.seen: dict[str, dict[str, int]] = {}  # group -> member -> its latest heartbeat (µs)
        self.held = 0
        self.refused = 0
        self.now = 0
        self.changed: dict[str, int] = {}  # group -> when its count last changed (µs)

    def row(self, row: dict[str, Any]) -> None:
        get = row.get
        group, member, ts = get("group_id"), get("member_id"), get("ts_request")
        if group is None or not member or ts is None:
            return
        member = _key(member)
        self.now = max(self.now, ts)
        members = self.seen.setdefault(group, {})
        if get("event") in _GONE or get("error_code") == UNKNOWN_MEMBER_ID:
            if members.pop(member, None) is not None:
                self.held -= 1
                self.changed[group] = ts
        elif get("error_code"):
            return  # another error (the coordinator moved, loading) says nothing of the member
        elif member in members:
            members[member] = max(members[member], ts)
        elif self.held >= self.max_members:
            self.refused += 1
        else:
            members[member] = ts
            self.held += 1
            self.changed[group] = ts

    def take_changed(self, now: int) -> list[tuple[str, int, int]]:
        """Members silent past the timeout at ``now`` (µs, the latest packet time known) gone, then
        (group, members, when its count changed) of every group whose count changed."""
        now = max(now, self.now)
        for group, members in self.seen.items():
            silent = [m for m, ts in members.items() if now - ts > self.timeout]
            for member in silent:
                self.changed[group] = max(self.changed.get(group, 0), members.pop(member) + self.timeout)
                self.held -= 1
        changed, self.changed = self.changed, {}
        out = [(group, len(self.seen[group]), ts) for group, ts in changed.items()]
        for group, _count, _ts in out:
            if not self.seen[group]:
                del self.seen[group]
        return out
