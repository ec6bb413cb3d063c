"""Header versions, header parsing, API names and error codes."""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path

import pytest

import kwsniff.protocol
from kwsniff.protocol import (
    DecodeError,
    api_name,
    error_name,
    error_retriable,
    is_flexible,
    is_valid_request_version,
    parse_request_header,
    parse_response_header,
    request_header_version,
    response_header_version,
)


def test_flexible_request_versions_use_header_v2_and_older_ones_v1() -> None:
    assert (request_header_version(0, 8), request_header_version(0, 9)) == (1, 2)
    assert (request_header_version(3, 8), request_header_version(3, 9)) == (1, 2)


def test_controlled_shutdown_v0_request_uses_header_v0() -> None:
    assert [request_header_version(7, v) for v in range(4)] == [0, 1, 1, 2]


def test_api_versions_response_always_uses_header_v0() -> None:
    assert [response_header_version(18, v) for v in range(6)] == [0] * 6
    assert (response_header_version(1, 11), response_header_version(1, 12)) == (0, 1)


def test_controlled_shutdown_v0_header_has_no_client_id() -> None:
    frame = struct.pack(">hhi", 7, 0, 55) + struct.pack(">i", 1)
    assert parse_request_header(frame) == (7, 0, 55, None, 8)


def test_header_v2_client_id_is_a_classic_string_followed_by_tagged_fields() -> None:
    frame = struct.pack(">hhih", 18, 3, 7, 7) + b"kwsniff" + b"\x01\x05\x02ab" + b"BODY"
    api_key, version, correlation, client_id, header_len = parse_request_header(frame)
    assert (api_key, version, correlation, client_id, header_len) == (18, 3, 7, "kwsniff", 22)
    assert frame[header_len:] == b"BODY"


def test_header_v1_null_client_id() -> None:
    frame = struct.pack(">hhih", 3, 1, -5, -1) + b"BODY"
    assert parse_request_header(memoryview(frame)) == (3, 1, -5, None, 10)


def test_response_header_v1_skips_tagged_fields_and_v0_does_not() -> None:
    assert parse_response_header(struct.pack(">i", 9) + b"\x00BODY", 3, 12) == (9, 5)
    assert parse_response_header(struct.pack(">i", 9) + b"\x00BODY", 18, 3) == (9, 4)
    assert parse_response_header(struct.pack(">i", 9) + b"\x00BODY", 3, 8) == (9, 4)


@pytest.mark.parametrize(
    ("frame", "offset", "path", "reason"),
    [
        (b"\x00\x03\x00", 3, "header", "truncated"),
        (struct.pack(">hhi", 3, 1, 1) + b"\x00", 8, "header.client_id", "truncated"),
        (struct.pack(">hhih", 3, 1, 1, 50) + b"abc", 10, "header.client_id", "string length exceeds frame"),
        (struct.pack(">hhih", 3, 1, 1, -2), 8, "header.client_id", "negative string length"),
        (struct.pack(">hhih", 18, 3, 1, 0), 10, "header._tagged_fields", "truncated"),
        (
            struct.pack(">hhih", 18, 3, 1, 0) + b"\x01\x00\x09ab",
            13,
            "header._tagged_fields",
            "tagged field size exceeds frame",
        ),
    ],
)
def test_short_or_garbled_request_headers_raise_decode_error(
    frame: bytes, offset: int, path: str, reason: str
) -> None:
    with pytest.raises(DecodeError) as caught:
        parse_request_header(frame)
    assert (caught.value.offset, caught.value.path, caught.value.reason) == (offset, path, reason)


def test_short_response_header_raises_decode_error() -> None:
    with pytest.raises(DecodeError, match="truncated"):
        parse_response_header(b"\x00\x00", 0, 9)


def test_valid_request_versions_span_both_snapshots() -> None:
    assert is_valid_request_version(0, 0)  # Produce v0: only in the 4.0 snapshot (KIP-896 removed it later)
    assert is_valid_request_version(0, 13)  # Produce v13: only in the newest snapshot
    assert not is_valid_request_version(0, 14)
    assert is_valid_request_version(4, 7)  # LeaderAndIsr, removed in Kafka 4.0
    assert not is_valid_request_version(99, 0)
    assert not is_valid_request_version(3, -1)


def test_is_flexible_follows_flexible_versions() -> None:
    assert (is_flexible(0, 8), is_flexible(0, 9), is_flexible(17, 1), is_flexible(99, 3)) == (
        False,
        True,
        False,
        False,
    )


def test_api_names_come_from_the_newest_spec() -> None:
    assert [api_name(k) for k in (0, 1, 4, 18, 74)] == [
        "Produce",
        "Fetch",
        "LeaderAndIsr",
        "ApiVersions",
        "ListConfigResources",
    ]
    assert api_name(99) == "Unknown(99)"


def test_error_codes_names_and_retriability() -> None:
    assert (error_name(0), error_name(6), error_name(-1)) == (
        "NONE",
        "NOT_LEADER_OR_FOLLOWER",
        "UNKNOWN_SERVER_ERROR",
    )
    assert error_name(1234) == "UNKNOWN_ERROR_CODE(1234)"
    assert (error_retriable(6), error_retriable(0), error_retriable(1234)) == (True, False, False)


# sha256 of the shared kafka-error-codes.csv (Kafka 4.4's error table, codes -1..136) on 2026-11-28, when
# the project's copy was last taken from it: the repository stays self-contained, so the test compares
# with the digest of the shared file at the time of the change rather than reading the shared folder.
SHARED_ERROR_CODES_SHA256 = "655535c0d8ad1678e18256462729282c6493b12484d542a3cb363e6a932a927d"


def test_error_codes_are_kafka_4_4s_table() -> None:
    path = Path(kwsniff.protocol.__file__).parent / "error_codes.csv"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == SHARED_ERROR_CODES_SHA256
    # The three codes Kafka 4.4 added.
    assert [error_name(code) for code in (134, 135, 136)] == [
        "GROUP_DELETION_FAILED",
        "STREAMS_TOPOLOGY_DESCRIPTION_UPDATE_FAILED",
        "CONTROLLER_ID_NOT_REGISTERED",
    ]
    assert [error_retriable(code) for code in (134, 135, 136)] == [False, False, False]
    assert error_name(137) == "UNKNOWN_ERROR_CODE(137)"
