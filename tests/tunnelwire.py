"""Test captures as operators meet them: real captures re-segmented to a 1500-byte MTU, then wrapped in
tunnels, labels, duplicates and fragments by scapy (an encoder independent of kwsniff; GPL-2.0, a test
dependency only, never imported by kwsniff)."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from pathlib import Path

from scapy.contrib.erspan import ERSPAN_II, ERSPAN_III
from scapy.contrib.geneve import GENEVE
from scapy.contrib.mpls import MPLS
from scapy.layers.inet import GRE, IP, TCP, UDP, fragment
from scapy.layers.inet6 import IPv6, IPv6ExtHdrFragment, fragment6
from scapy.layers.l2 import Dot1Q, Ether
from scapy.layers.vxlan import VXLAN
from scapy.packet import NoPayload, Packet, Raw
from scapy.utils import PcapWriter, rdpcap

MSS = 1448  # 1500 - 20 (IPv4) - 32 (TCP with timestamps)
OUTER_MAC = {"src": "02:00:00:00:00:01", "dst": "02:00:00:00:00:02"}
INNER_MAC = {"src": "02:00:00:00:01:01", "dst": "02:00:00:00:01:02"}
OUTER4 = {"src": "192.0.2.1", "dst": "192.0.2.2"}
OUTER6 = {"src": "2001:db8::1", "dst": "2001:db8::2"}

Wrap = Callable[[Packet, int], Iterable[Packet]]  # (inner Ether/IP/TCP packet, its index) -> frames


def resegment(path: Path) -> list[Packet]:
    """The capture's packets with every TCP payload cut to MSS-byte segments, as a 1500-byte MTU makes."""
    out: list[Packet] = []
    for pkt in rdpcap(str(path)):
        ip, tcp = pkt[IP], pkt[TCP]
        payload = bytes(tcp.payload)
        if len(payload) <= MSS:
            out.append(_rebuilt(pkt, ip, tcp, payload, tcp.seq, tcp.flags, ip.id))
            continue
        pieces = [payload[i : i + MSS] for i in range(0, len(payload), MSS)]
        for n, piece in enumerate(pieces):
            last = n == len(pieces) - 1
            flags = tcp.flags if last else tcp.flags & ~0x09  # PSH and FIN only on the last piece
            seq = (tcp.seq + n * MSS) & 0xFFFFFFFF
            out.append(_rebuilt(pkt, ip, tcp, piece, seq, flags, (ip.id + n) & 0xFFFF))
    return out


def _rebuilt(
    pkt: Packet, ip: Packet, tcp: Packet, payload: bytes, seq: int, flags: int, ident: int
) -> Packet:
    t = tcp.copy()
    t.remove_payload()
    t.seq, t.flags, t.chksum = seq, flags, None
    i = IP(src=ip.src, dst=ip.dst, id=ident, flags=ip.flags, ttl=ip.ttl) / t / Raw(payload)
    return _timed(Ether(**INNER_MAC) / i, pkt.time)


def _timed(pkt: Packet, ts: float) -> Packet:
    pkt.time = ts
    return pkt


def chain(*layers: Packet) -> Packet:
    """layers[0] / layers[1] / ... without the copies scapy's `/` makes of both sides."""
    top = layers[0]
    below = top
    for layer in layers[1:]:
        while not isinstance(below.payload, NoPayload):
            below = below.payload
        below.add_payload(layer)
        below = layer
    return top


def write(path: Path, frames: Iterable[Packet], linktype: int = 1) -> Path:
    with PcapWriter(str(path), linktype=linktype, sync=False) as w:
        for f in frames:
            w.write(f)
    return path


def wrapped(packets: list[Packet], wrap: Wrap) -> list[Packet]:
    """Each packet through ``wrap``; the wraps get the inner frame as an Inner (raw bytes, so that
    scapy builds only the outer layers: building the inner ones again is most of its time)."""
    out = []
    for n, pkt in enumerate(packets):
        inner = pkt if isinstance(pkt, Inner) else Inner(pkt)
        for frame in wrap(inner, n):
            out.append(_timed(frame, pkt.time))
    return out


def inners(packets: list[Packet]) -> list[Packet]:
    """The packets as Inner, made once for all the wraps."""
    return [Inner(p) for p in packets]


class Inner(Raw):  # type: ignore[misc]
    """An inner Ethernet frame as bytes; ``inner[IP]`` is its IP packet as bytes."""

    def __init__(self, pkt: Packet | None = None, **kwargs: object) -> None:
        if isinstance(pkt, Packet):
            super().__init__(bytes(pkt))
            self.ip = Raw(bytes(pkt[IP]))
            self.original = pkt
            self.time = pkt.time
        else:
            super().__init__(pkt, **kwargs)

    def __getitem__(self, layer: object) -> Packet:
        return self.ip if layer is IP else super().__getitem__(layer)


# -- encapsulations (each takes the inner Ethernet frame) ----------------------------------------------
def vxlan(vni: int = 42, port: int = 4789, ipv6: bool = False) -> Wrap:
    def wrap(pkt: Packet, n: int) -> list[Packet]:
        outer = IPv6(**OUTER6) if ipv6 else IP(**OUTER4, id=n & 0xFFFF)
        return [
            chain(Ether(**OUTER_MAC), outer, UDP(sport=49152 + n % 1000, dport=port), VXLAN(vni=vni), pkt)
        ]

    return wrap


def vlan_inside_vxlan(pkt: Packet, n: int) -> list[Packet]:
    inner = chain(
        Ether(**INNER_MAC, type=0x8100), Dot1Q(vlan=100, type=0x8100), Dot1Q(vlan=200, type=0x0800), pkt[IP]
    )
    return [chain(Ether(**OUTER_MAC), IP(**OUTER4), UDP(sport=50000, dport=4789), VXLAN(vni=7), inner)]


def geneve(pkt: Packet, n: int) -> list[Packet]:
    # Two option words (a class/type/length option header and 4 bytes of data), as OVN sends metadata.
    options = bytes.fromhex("0102 8001 00000017")
    gen = GENEVE(vni=5001, proto=0x6558, optionlen=len(options) // 4, options=options)
    return [chain(Ether(**OUTER_MAC), IP(**OUTER4), UDP(sport=50001, dport=6081), gen, pkt)]


def gre_ip(pkt: Packet, n: int) -> list[Packet]:
    gre = GRE(key_present=1, key=7, seqnum_present=1, sequence_number=n, proto=0x0800)
    return [chain(Ether(**OUTER_MAC), IP(**OUTER4), gre, pkt[IP])]


def gre_ethernet_over_ipv6(pkt: Packet, n: int) -> list[Packet]:
    return [chain(Ether(**OUTER_MAC), IPv6(**OUTER6), GRE(proto=0x6558), pkt)]


def erspan1(pkt: Packet, n: int) -> list[Packet]:
    return [chain(Ether(**OUTER_MAC), IP(**OUTER4), GRE(proto=0x88BE), pkt)]


def erspan2(pkt: Packet, n: int) -> list[Packet]:
    gre = GRE(seqnum_present=1, sequence_number=n, proto=0x88BE)
    return [chain(Ether(**OUTER_MAC), IP(**OUTER4), gre, ERSPAN_II(session_id=3, vlan=10), pkt)]


def erspan3(pkt: Packet, n: int) -> list[Packet]:
    gre = GRE(seqnum_present=1, sequence_number=n, proto=0x22EB)
    return [chain(Ether(**OUTER_MAC), IP(**OUTER4), gre, ERSPAN_III(session_id=9, o=0), pkt)]


def ipip(pkt: Packet, n: int) -> list[Packet]:
    return [chain(Ether(**OUTER_MAC), IP(**OUTER4, proto=4), pkt[IP])]


def ipv4_in_ipv6(pkt: Packet, n: int) -> list[Packet]:
    return [chain(Ether(**OUTER_MAC), IPv6(**OUTER6, nh=4), pkt[IP])]


def _ipv6_of(address: str) -> str:
    return "fd00::" + address.rsplit(".", 1)[1]


def ipv6_in_ipv4(pkt: Packet, n: int) -> list[Packet]:
    """The inner packet turned into IPv6 (fd00::<last octet>), carried in IPv4 as protocol 41."""
    ip, tcp = pkt.original[IP], pkt.original[TCP].copy()
    tcp.chksum = None
    inner = IPv6(src=_ipv6_of(ip.src), dst=_ipv6_of(ip.dst), nh=6) / tcp
    return [chain(Ether(**OUTER_MAC), IP(**OUTER4, proto=41), Raw(bytes(inner)))]


def mpls(pkt: Packet, n: int) -> list[Packet]:
    labels = chain(MPLS(label=16, s=0, ttl=64), MPLS(label=1001, s=1, ttl=64))
    return [chain(Ether(**OUTER_MAC, type=0x8847), labels, pkt[IP])]


def gre_then_vxlan(pkt: Packet, n: int) -> list[Packet]:
    """Two levels: a VXLAN overlay whose packets cross a GRE tunnel."""
    inner = chain(IP(**OUTER4), UDP(sport=50002, dport=4789), VXLAN(vni=42), pkt)
    return [
        chain(
            Ether(**OUTER_MAC), IP(src="198.51.100.1", dst="198.51.100.2"), GRE(key_present=1, key=1), inner
        )
    ]


def two_vnis(pkt: Packet, n: int) -> list[Packet]:
    """Every packet mirrored twice, under VNI 42 and 43 (both ends of a conversation mirrored)."""
    first = chain(Ether(**OUTER_MAC), IP(**OUTER4), UDP(sport=50003, dport=4789), VXLAN(vni=42), pkt)
    source = IP(src="192.0.2.9", dst="192.0.2.2")
    second = chain(Ether(**OUTER_MAC), source, UDP(sport=50004, dport=4789), VXLAN(vni=43), pkt)
    copy = _timed(second, float(pkt.time) + 0.00002)
    return [first, copy]


def nested(depth: int) -> Wrap:
    """A VXLAN in VXLAN ... ``depth`` times."""

    def wrap(pkt: Packet, n: int) -> list[Packet]:
        frame = pkt
        for level in range(depth):
            frame = chain(
                Ether(**OUTER_MAC), IP(**OUTER4), UDP(sport=50100, dport=4789), VXLAN(vni=level), frame
            )
        return [frame]

    return wrap


# -- fragments -----------------------------------------------------------------------------------------
def outer_fragments(seed: int = 1) -> Wrap:
    """VXLAN over a 1500-byte path: the outer IPv4 packet is fragmented, fragments out of order."""
    rng = random.Random(seed)

    def wrap(pkt: Packet, n: int) -> list[Packet]:
        outer = chain(IP(**OUTER4, id=n & 0xFFFF), UDP(sport=50005, dport=4789), VXLAN(vni=42), pkt)
        frags = [chain(Ether(**OUTER_MAC), f) for f in fragment(IP(bytes(outer)), fragsize=1480)]
        rng.shuffle(frags)
        return frags

    return wrap


def outer_fragments_ipv6(pkt: Packet, n: int) -> list[Packet]:
    outer = chain(IPv6(**OUTER6), IPv6ExtHdrFragment(id=n), UDP(sport=50006, dport=4789), VXLAN(vni=42), pkt)
    frags = [chain(Ether(**OUTER_MAC), f) for f in fragment6(IPv6(bytes(outer)), 1280)]
    return list(reversed(frags))


def inner_fragments(seed: int = 2) -> Wrap:
    """The inner IPv4 packet fragmented (to 576-byte pieces) before VXLAN, in random order."""
    rng = random.Random(seed)

    def wrap(pkt: Packet, n: int) -> list[Packet]:
        frags = fragment(IP(bytes(pkt[IP])), fragsize=552)
        rng.shuffle(frags)
        return [
            chain(
                Ether(**OUTER_MAC),
                IP(**OUTER4),
                UDP(sport=50007, dport=4789),
                VXLAN(vni=42),
                Ether(**INNER_MAC),
                f,
            )
            for f in frags
        ]

    return wrap


# name -> (wrap, the `tunnel` column of every connection, the skip reasons expected)
WRAPS: dict[str, tuple[Wrap, str, dict[str, int]]] = {
    "vxlan": (vxlan(), "vxlan:vni=42", {}),
    "vxlan_8472": (vxlan(port=8472), "vxlan:vni=42", {}),
    "vxlan_over_ipv6": (vxlan(ipv6=True), "vxlan:vni=42", {}),
    "vlan_inside_vxlan": (vlan_inside_vxlan, "vxlan:vni=7", {}),
    "geneve_with_options": (geneve, "geneve:vni=5001", {}),
    "gre_key_sequence": (gre_ip, "gre:key=7", {}),
    "gre_ethernet_over_ipv6": (gre_ethernet_over_ipv6, "gre", {}),
    "erspan_type1": (erspan1, "erspan1", {}),
    "erspan_type2": (erspan2, "erspan2:session=3", {}),
    "erspan_type3": (erspan3, "erspan3:session=9", {}),
    "ipv4_in_ipv4": (ipip, "ipip", {}),
    "ipv4_in_ipv6": (ipv4_in_ipv6, "ipip", {}),
    "ipv6_in_ipv4": (ipv6_in_ipv4, "ip6ip", {}),
    "mpls_two_labels": (mpls, "mpls:label=16.1001", {}),
    "gre_then_vxlan": (gre_then_vxlan, "gre:key=1/vxlan:vni=42", {}),
    "duplicates_under_two_vnis": (two_vnis, "vxlan:vni=42,vxlan:vni=43", {}),
    "outer_ipv4_fragments_shuffled": (outer_fragments(), "vxlan:vni=42", {"ip_fragment": 71}),
    "outer_ipv6_fragments_reversed": (outer_fragments_ipv6, "vxlan:vni=42", {"ip_fragment": 73}),
    "inner_ipv4_fragments_shuffled": (inner_fragments(), "vxlan:vni=42", {"ip_fragment": 150}),
}
BASE_CAPTURE = "kafka_python.pcap"
BROKER_PORT = 19103
