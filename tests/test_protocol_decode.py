"""Body decoders: every wire type, tagged fields, hostile lengths, and exact error locations."""

from __future__ import annotations

import contextlib
import struct
import tracemalloc
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafkawire import cstring, i16, i32, i64, string, uvarint

from kwsniff.protocol import DecodeError, decode_request, decode_response, schema_triples

# ---------------------------------------------------------------- byte builders (classic and compact)


def tags(*fields: tuple[int, bytes]) -> bytes:
    return uvarint(len(fields)) + b"".join(uvarint(tag) + uvarint(len(data)) + data for tag, data in fields)


NO_TAGS = uvarint(0)


# ---------------------------------------------------------------- types
def test_classic_strings_and_int32_decode_to_str_and_int() -> None:
    body = string("group-1") + i32(42) + string("member-9")
    assert decode_request(12, 0, body) == {
        "group_id": "group-1",
        "generation_id": 42,
        "member_id": "member-9",
    }


def test_null_nullable_string_is_none_and_records_stay_raw_bytes() -> None:
    records = b"\x00" * 12 + b"raw batch"
    body = (
        string(None)
        + i16(-1)
        + i32(30000)
        + i32(1)
        + string("t")
        + i32(1)
        + i32(0)
        + i32(len(records))
        + records
    )
    assert decode_request(0, 3, body) == {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 30000,
        "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": records}]}],
    }


def test_null_records_field_is_none() -> None:
    body = string("tx") + i16(1) + i32(5) + i32(1) + string("t") + i32(1) + i32(3) + i32(-1)
    message = decode_request(0, 3, body)
    assert message["transactional_id"] == "tx"
    assert message["topic_data"][0]["partition_data"][0] == {"index": 3, "records": None}


def test_uuid_bool_uint16_and_int16_fields() -> None:
    incarnation = uuid.UUID("12345678-1234-5678-1234-567812345678")
    body = (
        i32(3000)
        + incarnation.bytes
        + b"\x01"
        + uvarint(2)
        + cstring("CONTROLLER")
        + cstring("host-a")
        + struct.pack(">H", 65535)
        + i16(0)
        + NO_TAGS
        + uvarint(1)
        + NO_TAGS
    )
    assert decode_request(70, 0, body) == {
        "controller_id": 3000,
        "incarnation_id": incarnation,
        "zk_migration_ready": True,
        "listeners": [{"name": "CONTROLLER", "host": "host-a", "port": 65535, "security_protocol": 0}],
        "features": [],
    }


def test_float64_and_nested_struct_arrays() -> None:
    body = (
        i32(1)
        + i32(1)
        + string("user")
        + string(None)
        + i32(1)
        + string("producer_byte_rate")
        + struct.pack(">d", 1024.5)
        + b"\x00"
        + b"\x01"
    )
    assert decode_request(49, 0, body) == {
        "entries": [
            {
                "entity": [{"entity_type": "user", "entity_name": None}],
                "ops": [{"key": "producer_byte_rate", "value": 1024.5, "remove": False}],
            }
        ],
        "validate_only": True,
    }


def test_int32_array_and_null_classic_array() -> None:
    body = i32(1) + string("t") + i32(3) + i32(0) + i32(1) + i32(-7) + i32(60000)
    assert decode_request(43, 0, body) == {
        "topic_partitions": [{"topic": "t", "partitions": [0, 1, -7]}],
        "timeout_ms": 60000,
    }
    assert decode_request(43, 0, i32(-1) + i32(5)) == {"topic_partitions": None, "timeout_ms": 5}


def test_compact_strings_and_empty_compact_array() -> None:
    body = cstring("librdkafka") + cstring("2.6.1") + NO_TAGS
    assert decode_request(18, 3, body) == {
        "client_software_name": "librdkafka",
        "client_software_version": "2.6.1",
    }
    # Metadata v12: compact nullable array of topics, 0 means null (all topics).
    message = decode_request(3, 12, uvarint(0) + b"\x01" + b"\x00" + NO_TAGS)
    assert message == {
        "topics": None,
        "allow_auto_topic_creation": True,
        "include_topic_authorized_operations": False,
    }


def test_int8_int64_and_compact_uuid_array_in_flexible_message() -> None:
    # BrokerHeartbeat v1: offline_log_dirs is a tagged []uuid (tag 0).
    directory = uuid.UUID(int=7)
    body = i32(1) + i64(99) + i64(1234) + b"\x00" + b"\x01" + tags((0, uvarint(2) + directory.bytes))
    assert decode_request(63, 1, body) == {
        "broker_id": 1,
        "broker_epoch": 99,
        "current_metadata_offset": 1234,
        "want_fence": False,
        "want_shut_down": True,
        "offline_log_dirs": [directory],
    }


def test_invalid_utf8_in_a_string_becomes_replacement_character() -> None:
    body = i16(2) + b"\xff\xfe" + i32(1) + string("m")
    assert decode_request(12, 0, body)["group_id"] == "\ufffd\ufffd"


# ---------------------------------------------------------------- tagged fields
API_VERSIONS_V3_RESPONSE = i16(0) + uvarint(2) + i16(0) + i16(0) + i16(9) + NO_TAGS + i32(0)


def test_absent_tagged_fields_take_their_defaults() -> None:
    assert decode_response(18, 3, API_VERSIONS_V3_RESPONSE + NO_TAGS) == {
        "error_code": 0,
        "api_keys": [{"api_key": 0, "min_version": 0, "max_version": 9}],
        "throttle_time_ms": 0,
        "supported_features": [],
        "finalized_features_epoch": -1,
        "finalized_features": [],
        "zk_migration_ready": False,
    }


def test_known_tagged_field_is_decoded_and_unknown_tag_kept_raw() -> None:
    message = decode_response(18, 3, API_VERSIONS_V3_RESPONSE + tags((1, i64(77)), (9, b"\xde\xad")))
    assert message["finalized_features_epoch"] == 77
    assert message["_unknown_tags"] == {9: b"\xde\xad"}


def test_duplicate_and_out_of_order_tags_decode_and_last_wins() -> None:
    section = tags((3, b"\x01"), (1, i64(5)), (1, i64(6)))
    message = decode_response(18, 3, API_VERSIONS_V3_RESPONSE + section)
    assert (message["zk_migration_ready"], message["finalized_features_epoch"]) == (True, 6)
    assert "_unknown_tags" not in message


def test_tagged_field_size_beyond_body_is_a_decode_error() -> None:
    body = API_VERSIONS_V3_RESPONSE + uvarint(1) + uvarint(1) + uvarint(1000) + i64(5)
    with pytest.raises(DecodeError) as caught:
        decode_response(18, 3, body)
    assert caught.value.reason == "tagged field size 1000 exceeds body"
    assert caught.value.offset == len(API_VERSIONS_V3_RESPONSE) + 4
    assert caught.value.path == "_tagged_fields"


def test_known_tag_must_consume_exactly_its_size() -> None:
    body = API_VERSIONS_V3_RESPONSE + tags((1, i64(5) + b"\x00"))
    with pytest.raises(DecodeError) as caught:
        decode_response(18, 3, body)
    assert (caught.value.reason, caught.value.path) == (
        "tagged field not fully consumed",
        "finalized_features_epoch",
    )
    assert caught.value.offset == len(API_VERSIONS_V3_RESPONSE) + 3 + 8


def test_truncated_known_tag_reports_offset_in_the_body() -> None:
    body = API_VERSIONS_V3_RESPONSE + tags((1, i32(5)))
    with pytest.raises(DecodeError) as caught:
        decode_response(18, 3, body)
    assert (caught.value.reason, caught.value.path) == ("truncated", "finalized_features_epoch")
    assert caught.value.offset == len(API_VERSIONS_V3_RESPONSE) + 3


def test_tag_count_bomb_fails_before_looping() -> None:
    body = API_VERSIONS_V3_RESPONSE + uvarint(2**31) + b"\x00\x00"
    with pytest.raises(DecodeError, match="tagged field count 2147483648 exceeds body"):
        decode_response(18, 3, body)


def test_varint_longer_than_five_bytes_is_rejected() -> None:
    with pytest.raises(DecodeError) as caught:
        decode_request(18, 3, b"\xff\xff\xff\xff\xff\x01" + b"\x00" * 8)
    assert caught.value.reason == "varint too long"
    assert caught.value.path == "client_software_name"


# ---------------------------------------------------------------- hostile lengths and locations
# A count checked against the bytes left fails before anything is allocated for the elements (the
# franz-go rule); a decoder that built the list first would need gigabytes (2**31 slots of 8 bytes).
BOMB_PEAK_BYTES = 64 * 1024


def _peak_allocation(decode: Any) -> tuple[int, DecodeError]:
    with contextlib.suppress(DecodeError):
        decode()  # first, so the schema's lazy loading is not counted
    tracemalloc.start()
    try:
        with pytest.raises(DecodeError) as caught:
            decode()
        return tracemalloc.get_traced_memory()[1], caught.value
    finally:
        tracemalloc.stop()


def test_array_count_bomb_raises_without_allocating() -> None:
    body = i32(2**31 - 1) + b"\x00" * 10
    peak, error = _peak_allocation(lambda: decode_request(3, 0, body))
    assert peak < BOMB_PEAK_BYTES
    assert (error.offset, error.path, error.reason) == (4, "topics", "array count 2147483647 exceeds body")


def test_compact_array_count_bomb_raises_without_allocating() -> None:
    body = b"\xff\xff\xff\xff\x7f" + b"\x00" * 10
    peak, error = _peak_allocation(lambda: decode_request(3, 12, body))
    assert peak < BOMB_PEAK_BYTES
    assert (error.offset, error.path, error.reason) == (5, "topics", "array count 34359738366 exceeds body")


def test_string_longer_than_body_is_a_decode_error() -> None:
    with pytest.raises(DecodeError) as caught:
        decode_request(12, 0, i16(300) + b"abc")
    assert (caught.value.offset, caught.value.path, caught.value.reason) == (
        2,
        "group_id",
        "length 300 exceeds body",
    )


def test_truncated_records_report_exact_offset_and_path() -> None:
    body = (
        string(None)
        + i16(1)
        + i32(100)
        + i32(1)
        + string("a")
        + i32(2)
        + (i32(0) + i32(0))
        + (i32(1) + i32(100) + b"x" * 10)
    )
    with pytest.raises(DecodeError) as caught:
        decode_request(0, 3, body)
    error = caught.value
    assert (error.offset, error.path, error.reason) == (
        35,
        "topic_data[0].partition_data[1].records",
        "length 100 exceeds body",
    )
    assert str(error) == "length 100 exceeds body at topic_data[0].partition_data[1].records (offset 35)"


@pytest.mark.parametrize(
    ("cut", "offset", "path"), [(3, 2, "acks"), (5, 4, "timeout_ms"), (9, 8, "topic_data")]
)
def test_truncated_fixed_fields_name_the_field_that_ran_out(cut: int, offset: int, path: str) -> None:
    body = (string(None) + i16(1) + i32(100) + i32(0))[:cut]
    with pytest.raises(DecodeError) as caught:
        decode_request(0, 3, body)
    assert (caught.value.offset, caught.value.path, caught.value.reason) == (offset, path, "truncated")


def test_truncation_inside_array_element_names_index() -> None:
    body = i32(2) + string("a") + string("b")[:2]
    with pytest.raises(DecodeError) as caught:
        decode_request(3, 0, body)
    assert (caught.value.offset, caught.value.path, caught.value.reason) == (
        9,
        "topics[1].name",
        "length 1 exceeds body",
    )


def test_trailing_bytes_after_message_are_rejected() -> None:
    with pytest.raises(DecodeError) as caught:
        decode_request(12, 0, string("g") + i32(1) + string("m") + b"\x00")
    assert (caught.value.offset, caught.value.path, caught.value.reason) == (10, "", "trailing bytes")


def test_null_in_non_nullable_string_is_a_decode_error() -> None:
    with pytest.raises(DecodeError, match="null in non-nullable field at group_id"):
        decode_request(12, 0, string(None) + i32(1) + string("m"))


def test_unknown_api_key_and_unsupported_version() -> None:
    with pytest.raises(DecodeError, match="unknown api key 99"):
        decode_request(99, 0, b"")
    with pytest.raises(DecodeError) as caught:
        decode_response(0, 99, b"")
    assert caught.value.reason == "unsupported version"


def test_memoryview_body_decodes_like_bytes() -> None:
    frame = b"HEADER" + string("g") + i32(1) + string("m")
    assert decode_request(12, 0, memoryview(frame)[6:]) == {
        "group_id": "g",
        "generation_id": 1,
        "member_id": "m",
    }


# ListGroups v0-2 and ApiVersions v0-2 requests have no fields.
EMPTY_MESSAGES: list[tuple[int, int, str, dict[str, object]]] = [
    (key, version, "request", dict()) for key in (16, 18) for version in range(3)
]


def test_every_schema_version_compiles_and_rejects_an_empty_body_cleanly() -> None:
    triples = schema_triples()
    assert len(triples) == 736
    empty_messages: list[tuple[int, int, str, dict[str, object]]] = []
    for key, version, direction in triples:
        decode = decode_request if direction == "request" else decode_response
        try:
            message = decode(key, version, b"")
        except DecodeError as error:
            assert (error.offset, error.reason) == (0, "truncated")
        else:
            empty_messages.append((key, version, direction, message))
    # Only classic (non-flexible) messages without fields may be empty.
    assert empty_messages == EMPTY_MESSAGES


_FUZZ_TRIPLES = [t for i, t in enumerate(schema_triples()) if i % 7 == 0]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(index=st.integers(0, len(_FUZZ_TRIPLES) - 1), body=st.binary(max_size=64))
def test_random_bytes_only_ever_decode_or_raise_decode_error(index: int, body: bytes) -> None:
    key, version, direction = _FUZZ_TRIPLES[index]
    decode = decode_request if direction == "request" else decode_response
    with contextlib.suppress(DecodeError):
        decode(key, version, body)
