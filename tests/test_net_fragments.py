"""IP fragments reassembled as Linux reassembles them, under a byte cap, and a nesting bomb held to the
depth limit. Packets are built by scapy; kwsniff.net's Decapsulator is fed them directly."""

from __future__ import annotations

from scapy.layers.inet import GRE, IP, TCP, UDP, fragment
from scapy.layers.inet6 import IPv6, IPv6ExtHdrFragment, fragment6
from scapy.layers.l2 import Ether
from scapy.layers.vxlan import VXLAN
from scapy.packet import Raw

from kwsniff.net import Decapsulator, DuplicateFilter
from kwsniff.net.fragments import FRAGMENT_OVERHEAD, Defragmenter
from kwsniff.net.linktypes import ETHERNET

SEGMENT = IP(src="10.0.0.1", dst="10.0.0.2", id=77) / TCP(sport=40000, dport=9092, seq=1000, flags="PA")
PAYLOAD = bytes(range(256)) * 6  # 1536 bytes


def frames(ip_fragments: list) -> list[bytes]:
    return [bytes(Ether() / f) for f in ip_fragments]


def test_fragments_in_reverse_order_make_the_whole_segment() -> None:
    decap = Decapsulator()
    parts = frames(fragment(SEGMENT / Raw(PAYLOAD), fragsize=400))
    results = [decap.parse(i, ETHERNET, f) for i, f in enumerate(reversed(parts))]
    assert results[:-1] == ["ip_fragment"] * (len(parts) - 1)
    (src, sport, dst, dport, seq, _, _, payload, missing), tunnel, _ = results[-1]  # type: ignore[misc]
    assert (sport, dport, seq, bytes(payload), missing, tunnel) == (40000, 9092, 1000, PAYLOAD, 0, "")
    assert decap.defrag.stats.as_dict() == {
        "fragments": 4,
        "reassembled": 1,
        "held_bytes_peak": 1556 + 4 * 64,
    }


def test_a_copy_of_a_fragment_is_dropped_and_the_datagram_kept() -> None:
    # Linux: a fragment wholly inside one already held is a duplicate (IPFRAG_DUP), the queue survives.
    decap = Decapsulator()
    first, second, third, last = frames(fragment(SEGMENT / Raw(PAYLOAD), fragsize=400))
    assert [decap.parse(0, ETHERNET, f) for f in (first, second, second, third)] == ["ip_fragment"] * 4
    assert isinstance(decap.parse(1, ETHERNET, last), tuple)
    assert decap.defrag.stats.duplicates == 1


def test_overlapping_ipv4_fragments_discard_the_datagram() -> None:
    # Linux since 4.19 (as RFC 5722 for IPv6): any other overlap drops the whole datagram (IPFRAG_OVERLAP).
    decap = Decapsulator()
    whole = bytes(SEGMENT / Raw(PAYLOAD))
    header = IP(whole)
    header.remove_payload()
    body = whole[20:]
    overlapping = [
        IP(src=header.src, dst=header.dst, id=77, proto=6, flags="MF", frag=0) / Raw(body[:800]),
        IP(src=header.src, dst=header.dst, id=77, proto=6, flags="MF", frag=50) / Raw(body[400:1200]),
        IP(src=header.src, dst=header.dst, id=77, proto=6, frag=100) / Raw(body[800:]),
    ]
    assert [decap.parse(0, ETHERNET, f) for f in frames(overlapping)] == ["ip_fragment"] * 3
    assert decap.defrag.stats.overlaps == 1
    assert decap.defrag.held_bytes == 64 + len(body[800:])  # only the last one, starting a new datagram


def test_overlapping_ipv6_fragments_discard_the_datagram() -> None:
    decap = Decapsulator()
    packet = IPv6(src="fd00::1", dst="fd00::2") / IPv6ExtHdrFragment(id=5) / TCP(dport=9092) / Raw(PAYLOAD)
    parts = frames(fragment6(packet, 600))
    assert len(parts) == 3
    raw = bytearray(parts[1])
    raw[14 + 40 + 2 : 14 + 40 + 4] = ((int.from_bytes(raw[56:58], "big") & 0xFFF8) - 8 | 1).to_bytes(2, "big")
    results = [decap.parse(0, ETHERNET, f) for f in (parts[0], bytes(raw), parts[2])]
    assert results == ["ip_fragment"] * 3
    assert decap.defrag.stats.overlaps == 1


def test_outer_ipv6_fragments_of_vxlan_are_reassembled() -> None:
    decap = Decapsulator()
    inner = Ether() / SEGMENT / Raw(PAYLOAD)
    outer = IPv6(src="2001:db8::1", dst="2001:db8::2") / IPv6ExtHdrFragment(id=9) / UDP(dport=4789)
    parts = frames(fragment6(outer / VXLAN(vni=3) / inner, 1000))
    results = [decap.parse(0, ETHERNET, f) for f in reversed(parts)]
    packet, tunnel, _ = results[-1]  # type: ignore[misc]
    assert (bytes(packet[7]), tunnel) == (PAYLOAD, "vxlan:vni=3")


def test_a_fragment_flood_is_held_under_the_cap_and_what_was_evicted_is_counted() -> None:
    cap = 64 * 1024
    decap = Decapsulator(fragment_bytes=cap)
    template = bytearray(
        bytes(Ether() / IP(src="10.9.0.1", dst="10.9.0.2", proto=6, flags="MF") / Raw(b"x" * 1000))
    )
    for n in range(10_000):  # first fragments of 10,000 datagrams that never complete
        template[18:20] = n.to_bytes(2, "big")  # the IP id
        assert decap.parse(n, ETHERNET, bytes(template)) == "ip_fragment"
        assert decap.defrag.held_bytes <= cap
    held = cap // (1000 + FRAGMENT_OVERHEAD)
    st = decap.defrag.stats
    evicted = 10_000 - held
    assert (st.evicted, st.evicted_bytes, st.held_bytes_peak) == (evicted, evicted * 1064, held * 1064)
    decap.defrag.finish()
    assert st.timed_out == held


def test_incomplete_datagrams_time_out_by_capture_time() -> None:
    defrag = Defragmenter(timeout_us=30_000_000)
    for n in range(3):
        defrag.add(n * 20_000_000, (b"a", b"b", n, 6), 0, True, b"y" * 8, b"h" * 20, lambda h, n: h)
    # At 40 s the first (0 s) is past 30 s; the second (20 s) and third (40 s) are still held.
    assert (defrag.stats.timed_out, len(defrag._pending)) == (1, 2)


def test_a_nesting_bomb_stops_at_the_depth_limit() -> None:
    decap = Decapsulator(max_depth=4)
    frame = bytes(SEGMENT / Raw(b"k"))
    for _ in range(200):  # GRE in IP, 200 deep
        frame = bytes(IP(src="10.1.1.1", dst="10.1.1.2") / GRE(proto=0x0800) / Raw(frame))
    assert decap.parse(0, ETHERNET, bytes(Ether(type=0x0800) / Raw(frame))) == "tunnel_too_deep"
    assert decap.stats.too_deep == 1


def test_a_fragment_inside_a_reassembled_ipv6_fragment_is_refused() -> None:
    decap = Decapsulator()
    inner = IPv6ExtHdrFragment(id=2, offset=0, m=1, nh=6) / TCP(dport=9092) / Raw(b"z" * 16)
    outer = IPv6(src="fd00::1", dst="fd00::2") / IPv6ExtHdrFragment(id=1) / inner
    parts = frames(fragment6(outer, 80))
    results = [decap.parse(0, ETHERNET, f) for f in parts]
    assert results[-1] == "bad_ip_header"


def test_the_duplicate_filter_is_bounded_and_forgets_after_two_windows() -> None:
    f = DuplicateFilter(window_us=500_000, max_keys=1000)
    assert not f.seen(0, (b"a", 1))
    assert f.seen(10, (b"a", 1))  # a copy
    assert not f.seen(10, (b"a", 2))  # another IP id: a retransmission, not a copy
    for n in range(10_000):  # a flood of distinct packets in one window
        assert not f.seen(100 + n, (b"flood", n))
        assert len(f._current) + len(f._previous) <= 2000
    assert f.early_rotations == 10  # every 1,000 keys (the first generation began with 2)
    g = DuplicateFilter(window_us=500_000)
    g.seen(0, (b"b", 1))
    g.seen(600_000, (b"c", 1))  # a new generation: the first is still remembered
    assert g.seen(700_000, (b"b", 1))
    g.seen(1_200_000, (b"d", 1))  # and another: now it is forgotten
    assert not g.seen(1_300_000, (b"b", 1))
