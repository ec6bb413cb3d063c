"""parse_tcp: frames of every supported link type in, TCP segments or skip reasons out."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kwsniff.net import ACK, FIN, PSH, RST, SKIP_REASONS, SYN, format_ip, parse_tcp

CLIENT4 = bytes([10, 0, 0, 1])
BROKER4 = bytes([10, 0, 0, 2])
CLIENT6 = bytes.fromhex("20010db8000000000000000000000001")
BROKER6 = bytes.fromhex("20010db8000000000000000000000002")
KAFKA_BYTES = b"\x00\x00\x00\x0cproduce!"


def tcp(
    payload: bytes = KAFKA_BYTES, flags: int = ACK | PSH, options: bytes = b"", doff: int | None = None
) -> bytes:
    words = doff if doff is not None else (20 + len(options)) // 4
    return (
        struct.pack("!HHIIBBHHH", 50000, 9092, 1000, 2000, words << 4, flags, 65535, 0, 0) + options + payload
    )


def ipv4(
    segment: bytes, proto: int = 6, frag: int = 0, options: bytes = b"", total: int | None = None
) -> bytes:
    ihl = 5 + len(options) // 4
    length = 4 * ihl + len(segment) if total is None else total
    header = struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, 0, length, 7, frag, 64, proto, 0, CLIENT4, BROKER4)
    return header + options + segment


def ipv6(segment: bytes, extensions: bytes = b"", first: int = 6, payload_len: int | None = None) -> bytes:
    plen = len(extensions) + len(segment) if payload_len is None else payload_len
    return struct.pack("!IHBB16s16s", 0x60000000, plen, first, 64, CLIENT6, BROKER6) + extensions + segment


def ethernet(ip: bytes, ethertype: int = 0x0800, vlans: tuple[int, ...] = ()) -> bytes:
    tags = b"".join(struct.pack("!HH", tpid, 100 + i) for i, tpid in enumerate(vlans))
    return b"\x02" * 6 + b"\x04" * 6 + tags + struct.pack("!H", ethertype) + ip


def expected(
    src: bytes, dst: bytes, payload: bytes = KAFKA_BYTES, flags: int = ACK | PSH, missing: int = 0
) -> tuple:
    return (src, 50000, dst, 9092, 1000, 2000, flags, payload, missing)


def as_values(result: tuple | str) -> tuple | str:
    """The result with the payload memoryview turned into bytes, for comparing."""
    if isinstance(result, str):
        return result
    assert type(result) is tuple and isinstance(result[7], memoryview)
    return (*result[:7], bytes(result[7]), result[8])


def test_ethernet_ipv4_segment_has_all_fields_in_documented_order() -> None:
    assert as_values(parse_tcp(1, ethernet(ipv4(tcp())))) == expected(CLIENT4, BROKER4)


def test_payload_is_a_view_into_the_frame_not_a_copy() -> None:
    frame = ethernet(ipv4(tcp()))
    payload = parse_tcp(1, frame)[7]
    assert isinstance(payload, memoryview)
    assert payload.obj is frame
    assert payload.nbytes == len(KAFKA_BYTES)


def test_ethernet_padding_after_a_short_segment_is_not_payload() -> None:
    frame = ethernet(ipv4(tcp(b"ok")))
    padded = frame + b"\x00" * (60 - len(frame))
    assert len(padded) == 60
    assert as_values(parse_tcp(1, padded)) == expected(CLIENT4, BROKER4, b"ok")


def test_pure_ack_padded_to_minimum_frame_has_empty_payload() -> None:
    frame = ethernet(ipv4(tcp(b"", flags=ACK))) + b"\x00" * 6
    assert as_values(parse_tcp(1, frame)) == expected(CLIENT4, BROKER4, b"", ACK)


def test_snaplen_cut_segment_reports_missing_payload_bytes() -> None:
    frame = ethernet(ipv4(tcp(bytes(range(100)))))
    assert as_values(parse_tcp(1, frame[:64])) == expected(CLIENT4, BROKER4, bytes(range(10)), missing=90)


def test_cut_inside_tcp_header_is_truncated_header() -> None:
    assert parse_tcp(1, ethernet(ipv4(tcp()))[:40]) == "truncated_header"


def test_ipv4_options_and_tcp_options_are_skipped() -> None:
    frame = ethernet(ipv4(tcp(options=b"\x01\x01\x08\x0a" + bytes(8)), options=b"\x01\x01\x01\x00"))
    assert as_values(parse_tcp(1, frame)) == expected(CLIENT4, BROKER4)


def test_zero_ipv4_total_length_from_tso_uses_captured_length() -> None:
    assert as_values(parse_tcp(1, ethernet(ipv4(tcp(), total=0)))) == expected(CLIENT4, BROKER4)


@pytest.mark.parametrize("frag", [0x2000, 0x0010, 0x2010], ids=["more_fragments", "offset", "both"])
def test_ipv4_fragments_are_skipped(frag: int) -> None:
    assert parse_tcp(1, ethernet(ipv4(tcp(), frag=frag))) == "ip_fragment"


def test_dont_fragment_flag_alone_is_a_whole_packet() -> None:
    assert as_values(parse_tcp(1, ethernet(ipv4(tcp(), frag=0x4000)))) == expected(CLIENT4, BROKER4)


@pytest.mark.parametrize(
    ("frame", "reason"),
    [
        (ethernet(ipv4(b"\x00" * 16, proto=17)), "not_tcp"),
        (ethernet(b"\x00\x01\x08\x00" + bytes(24), ethertype=0x0806), "not_ip"),
        (ethernet(b""), "truncated_header"),
        (b"\x02" * 10, "truncated_header"),
        (ethernet(ipv4(tcp())[:12]), "truncated_header"),
        (ethernet(b"\x44" + ipv4(tcp())[1:]), "bad_ip_header"),
        (ethernet(b"\x55" + ipv4(tcp())[1:]), "bad_ip_header"),
        (ethernet(ipv4(tcp(), total=10)), "bad_ip_header"),
        (ethernet(ipv4(tcp(doff=4))), "bad_tcp_offset"),
        (ethernet(ipv4(tcp(doff=15))), "bad_tcp_offset"),
    ],
    ids=[
        "udp",
        "arp",
        "no_ip",
        "short_ethernet",
        "short_ip",
        "ihl_4",
        "version_5",
        "total_10",
        "doff_4",
        "doff_15",
    ],
)
def test_damaged_or_foreign_frames_give_their_reason(frame: bytes, reason: str) -> None:
    assert parse_tcp(1, frame) == reason


def test_unknown_linktype_is_unsupported() -> None:
    assert parse_tcp(105, ethernet(ipv4(tcp()))) == "unsupported_linktype"


def test_stacked_vlan_tags_of_every_kind_are_skipped() -> None:
    frame = ethernet(ipv4(tcp()), vlans=(0x88A8, 0x8100, 0x9100))
    assert as_values(parse_tcp(1, frame)) == expected(CLIENT4, BROKER4)


def test_vlan_tagged_ipv6() -> None:
    assert as_values(parse_tcp(1, ethernet(ipv6(tcp()), 0x86DD, vlans=(0x8100,)))) == expected(
        CLIENT6, BROKER6
    )


def test_vlan_tag_cut_short_is_truncated_header() -> None:
    assert parse_tcp(1, ethernet(b"", vlans=(0x8100,))[:16]) == "truncated_header"


def sll(ip: bytes, protocol: int) -> bytes:
    return struct.pack("!HHH8sH", 0, 1, 6, b"\x02" * 6 + b"\x00\x00", protocol) + ip


def sll2(ip: bytes, protocol: int) -> bytes:
    return struct.pack("!HHIHBB8s", protocol, 0, 3, 1, 0, 6, b"\x02" * 6 + b"\x00\x00") + ip


@pytest.mark.parametrize(
    ("linktype", "frame", "src", "dst"),
    [
        (1, ethernet(ipv6(tcp()), 0x86DD), CLIENT6, BROKER6),
        (113, sll(ipv4(tcp()), 0x0800), CLIENT4, BROKER4),
        (113, sll(ipv6(tcp()), 0x86DD), CLIENT6, BROKER6),
        (276, sll2(ipv4(tcp()), 0x0800), CLIENT4, BROKER4),
        (276, sll2(ipv6(tcp()), 0x86DD), CLIENT6, BROKER6),
        (101, ipv4(tcp()), CLIENT4, BROKER4),
        (101, ipv6(tcp()), CLIENT6, BROKER6),
        (12, ipv4(tcp()), CLIENT4, BROKER4),
        (12, ipv6(tcp()), CLIENT6, BROKER6),
        (14, ipv4(tcp()), CLIENT4, BROKER4),
        (14, ipv6(tcp()), CLIENT6, BROKER6),
        (228, ipv4(tcp()), CLIENT4, BROKER4),
        (229, ipv6(tcp()), CLIENT6, BROKER6),
        (0, struct.pack("<I", 2) + ipv4(tcp()), CLIENT4, BROKER4),
        (0, struct.pack(">I", 2) + ipv4(tcp()), CLIENT4, BROKER4),
        (0, struct.pack("<I", 24) + ipv6(tcp()), CLIENT6, BROKER6),
        (0, struct.pack(">I", 28) + ipv6(tcp()), CLIENT6, BROKER6),
        (0, struct.pack("<I", 30) + ipv6(tcp()), CLIENT6, BROKER6),
        (108, struct.pack(">I", 2) + ipv4(tcp()), CLIENT4, BROKER4),
        (108, struct.pack(">I", 24) + ipv6(tcp()), CLIENT6, BROKER6),
    ],
    ids=[
        "ethernet_v6",
        "sll_v4",
        "sll_v6",
        "sll2_v4",
        "sll2_v6",
        "raw101_v4",
        "raw101_v6",
        "raw12_v4",
        "raw12_v6",
        "raw14_v4",
        "raw14_v6",
        "ipv4_228",
        "ipv6_229",
        "null_le_v4",
        "null_be_v4",
        "null_le_af24",
        "null_be_af28",
        "null_le_af30",
        "loop_v4",
        "loop_v6",
    ],
)
def test_every_supported_linktype_yields_the_segment(
    linktype: int, frame: bytes, src: bytes, dst: bytes
) -> None:
    assert as_values(parse_tcp(linktype, frame)) == expected(src, dst)


@pytest.mark.parametrize(
    ("linktype", "frame"),
    [
        (113, sll(b"\x00" * 28, 0x0806)),
        (101, b"\x50" + bytes(40)),
        (0, struct.pack("<I", 7) + ipv4(tcp())),
        (108, struct.pack("<I", 2) + ipv4(tcp())),
    ],
    ids=["sll_arp", "raw_version5", "null_unknown_family", "loop_little_endian_family"],
)
def test_non_ip_payloads_of_other_linktypes_are_not_ip(linktype: int, frame: bytes) -> None:
    assert parse_tcp(linktype, frame) == "not_ip"


def ext(next_header: int, units: int) -> bytes:
    """An 8-octet-unit IPv6 extension header of (units + 1) * 8 bytes."""
    return bytes([next_header, units]) + bytes(6 + 8 * units)


def fragment_header(next_header: int, offset: int, more: bool) -> bytes:
    return struct.pack("!BBHI", next_header, 0, offset << 3 | more, 99)


def test_ipv6_extension_header_chain_is_walked() -> None:
    chain = ext(43, 0) + ext(60, 1) + ext(6, 0)
    assert as_values(parse_tcp(1, ethernet(ipv6(tcp(), chain, first=0), 0x86DD))) == expected(
        CLIENT6, BROKER6
    )


def test_ipv6_authentication_header_is_walked() -> None:
    ah = bytes([6, 4]) + bytes(22)  # (4 + 2) * 4 = 24 bytes
    assert as_values(parse_tcp(229, ipv6(tcp(), ah, first=51))) == expected(CLIENT6, BROKER6)


def test_ipv6_atomic_fragment_is_a_whole_packet() -> None:
    frame = ipv6(tcp(), fragment_header(6, 0, False), first=44)
    assert as_values(parse_tcp(229, frame)) == expected(CLIENT6, BROKER6)


@pytest.mark.parametrize(("offset", "more"), [(0, True), (185, False), (185, True)])
def test_ipv6_fragments_are_skipped(offset: int, more: bool) -> None:
    assert parse_tcp(229, ipv6(tcp(), fragment_header(6, offset, more), first=44)) == "ip_fragment"


def test_ipv6_without_tcp_is_not_tcp() -> None:
    assert parse_tcp(229, ipv6(b"", ext(59, 0), first=0)) == "not_tcp"
    assert parse_tcp(229, ipv6(b"\x00" * 8, first=17)) == "not_tcp"


def test_ipv6_extension_header_longer_than_packet_is_bad_ip_header() -> None:
    claims_1608_bytes = bytes([6, 200]) + bytes(6)
    assert parse_tcp(229, ipv6(tcp(), claims_1608_bytes, first=0)) == "bad_ip_header"


def test_ipv6_snaplen_cut_reports_missing() -> None:
    frame = ipv6(tcp(bytes(50)))
    assert as_values(parse_tcp(229, frame[:70])) == expected(CLIENT6, BROKER6, bytes(10), missing=40)


def test_ipv6_zero_payload_length_uses_captured_length() -> None:
    assert as_values(parse_tcp(229, ipv6(tcp(), payload_len=0))) == expected(CLIENT6, BROKER6)


def test_ipv6_padding_beyond_payload_length_is_dropped() -> None:
    assert as_values(parse_tcp(229, ipv6(tcp()) + b"\xff" * 7)) == expected(CLIENT6, BROKER6)


def test_fast_and_general_ipv4_paths_agree_on_every_field() -> None:
    # Ethernet takes the inlined fast path, raw IPv4 (228) goes through the link-parser table.
    for frame in (tcp(), tcp(b""), tcp(flags=SYN), tcp(options=bytes(12))):
        assert as_values(parse_tcp(1, ethernet(ipv4(frame)))) == as_values(parse_tcp(228, ipv4(frame)))


def test_flag_constants_are_the_tcp_header_bits() -> None:
    assert (FIN, SYN, RST, PSH, ACK) == (0x01, 0x02, 0x04, 0x08, 0x10)
    assert parse_tcp(1, ethernet(ipv4(tcp(b"", flags=SYN | ACK))))[6] == 0x12


def test_format_ip_gives_dotted_quad_and_compressed_ipv6() -> None:
    assert format_ip(CLIENT4) == "10.0.0.1"
    assert format_ip(bytes(15) + b"\x01") == "::1"
    assert format_ip(CLIENT6) == "2001:db8::1"
    assert format_ip(memoryview(BROKER4)) == "10.0.0.2"  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        format_ip(b"\x01\x02\x03")


@given(linktype=st.sampled_from([0, 1, 12, 14, 101, 108, 113, 228, 229, 276]), data=st.binary(max_size=120))
def test_arbitrary_bytes_give_a_segment_or_a_known_reason(linktype: int, data: bytes) -> None:
    result = parse_tcp(linktype, data)
    if isinstance(result, str):
        assert result in SKIP_REASONS
    else:
        assert len(result) == 9 and result[7].nbytes <= len(data) and result[8] >= 0


@given(cut=st.integers(min_value=0, max_value=80), vlans=st.integers(min_value=0, max_value=3))
def test_any_cut_of_a_valid_frame_gives_a_prefix_or_a_reason(cut: int, vlans: int) -> None:
    frame = ethernet(ipv4(tcp(bytes(range(30)))), vlans=(0x8100,) * vlans)[: 14 + 4 * vlans + cut]
    result = parse_tcp(1, frame)
    if isinstance(result, str):
        assert result == "truncated_header"
    else:
        payload = bytes(result[7])
        assert payload == bytes(range(len(payload)))
        assert len(payload) + result[8] == 30
