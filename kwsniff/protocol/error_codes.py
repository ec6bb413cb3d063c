"""Kafka error code names and retriability, from error_codes.csv (a copy of Kafka's Errors table)."""

from __future__ import annotations

import csv
import io
import os


def _load() -> tuple[dict[int, str], frozenset[int]]:
    # Beside this module, read directly: importlib.resources (for zipped packages, which kwsniff
    # never is) took ~3% of `read`'s start-up.
    with open(os.path.join(os.path.dirname(__file__), "error_codes.csv"), encoding="utf-8") as file:
        text = file.read()
    names: dict[int, str] = {}
    retriable: set[int] = set()
    for row in csv.DictReader(io.StringIO(text)):
        code = int(row["code"])
        names[code] = row["name"]
        if row["retriable"].strip().lower() == "true":
            retriable.add(code)
    return names, frozenset(retriable)


_NAMES, _RETRIABLE = _load()


def error_name(code: int) -> str:
    """ "NOT_LEADER_OR_FOLLOWER" for 6; "UNKNOWN_ERROR_CODE(1234)" for codes this Kafka does not know."""
    name = _NAMES.get(code)
    return name if name is not None else f"UNKNOWN_ERROR_CODE({code})"


def error_names() -> list[str]:
    """The name of every error code this Kafka knows."""
    return list(_NAMES.values())


def error_label(code: int) -> str:
    """ "NOT_LEADER_OR_FOLLOWER(6)" for 6; "UNKNOWN_ERROR_CODE(1234)" for a code whose name holds it."""
    name = _NAMES.get(code)
    return f"{name}({code})" if name is not None else error_name(code)


def error_retriable(code: int) -> bool:
    """Whether Kafka marks the error retriable (unknown codes are not)."""
    return code in _RETRIABLE


# Codes a healthy client meets in its normal handshakes, apart from real failures (error code ->
# the API keys it is expected on, or None: on any API). MEMBER_ID_REQUIRED (79) answers a first
# JoinGroup v4+ (KIP-394); REBALANCE_IN_PROGRESS (27) tells members to rejoin (Heartbeat, SyncGroup,
# OffsetCommit); UNSUPPORTED_VERSION (35) answers an ApiVersions newer than the broker's (KIP-511);
# FETCH_SESSION_ID_NOT_FOUND (70) restarts a fetch session (KIP-227); NOT_COORDINATOR (16) and
# COORDINATOR_LOAD_IN_PROGRESS (14) send a client to look the coordinator up again. The report's
# `errors` section and the per-client error metric both judge by this one table.
EXPECTED_ERRORS: dict[int, frozenset[int] | None] = {
    79: frozenset({11}),
    27: frozenset({8, 12, 14}),
    35: frozenset({18}),
    70: frozenset({1}),
    14: None,
    16: None,
}


def error_expected(code: int | None, api_key: int | None) -> bool:
    """Whether error ``code`` answering API ``api_key`` is one of EXPECTED_ERRORS."""
    if code not in EXPECTED_ERRORS:
        return False
    apis = EXPECTED_ERRORS[code]
    return apis is None or api_key in apis
