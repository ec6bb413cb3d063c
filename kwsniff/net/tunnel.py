"""Tunnelled, labelled and fragmented packets down to the inner TCP segment. Pure; no I/O.

parse_tcp keeps the plain Ethernet/IP/TCP path; a frame it gives up on as not TCP, not IP or a
fragment comes here, where the full walk runs: VLAN tags, MPLS label stacks (RFC 3032), VXLAN
(RFC 7348), Geneve (RFC 8926), GRE (RFC 2784 with RFC 2890 key and sequence), ERSPAN types I to III,
IPv4/IPv6 in IPv4/IPv6 (protocols 4 and 41, RFC 2003/4213/2473) and IP fragments, to a fixed depth.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from struct import Struct

from kwsniff.net.fragments import FRAGMENT_BYTES, Defragmenter
from kwsniff.net.ip import PROTO_TCP, TcpPacket, tcp_segment
from kwsniff.net.linktypes import (
    ETHERNET,
    ETHERTYPE_IPV4,
    ETHERTYPE_IPV6,
    LINK_PARSERS,
    LINUX_SLL,
    LINUX_SLL2,
    VLAN_ETHERTYPES,
)

VXLAN_PORTS = frozenset((4789, 8472))  # IANA's, and the Linux kernel's (Flannel's) older default
GENEVE_PORTS = frozenset((6081,))
TUNNEL_KINDS = ("vxlan", "geneve")  # the kinds whose UDP ports are options
MAX_DEPTH = 4

# A decapsulated segment: (TcpPacket, tunnel path such as "vxlan:vni=42/gre:key=7", duplicate key).
# Addresses and TCP header, and the IPv4 id (-1 for IPv6): what two copies of one packet share.
DuplicateKey = tuple[bytes, int]
Carried = tuple[TcpPacket, str, DuplicateKey]

_IPV4 = Struct("!BxHHHxB2x4s4s")
_IPV6 = Struct("!BxxxHBx16s16s")
_U16 = Struct("!H")
_ETHERTYPE_MPLS = frozenset((0x8847, 0x8848))
_ETHERTYPE_TEB = 0x6558  # transparent Ethernet bridging: an Ethernet frame follows
_ERSPAN_II = 0x88BE
_ERSPAN_III = 0x22EB
_PROTO_UDP = 17
_PROTO_GRE = 47
_PROTO_IPIP = 4
_PROTO_IPV6 = 41
_IPV6_EXT_8 = frozenset((0, 43, 60, 135, 139, 140))
_IPV6_FRAGMENT = 44
_IPV6_AH = 51
_IPV6_WALKED = _IPV6_EXT_8 | {_IPV6_FRAGMENT, _IPV6_AH}
MAX_LABELS = 16  # an MPLS stack deeper than this is damage, not a network

_ETH, _IP4, _IP6, _MPLS = range(4)

# The overlay case nearly all tunnelled traffic is: Ethernet/IPv4 (no options)/UDP/VXLAN/Ethernet/
# IPv4 (no options)/TCP, unpacked at once. Outer: ethertype, version/IHL, flags+fragment offset,
# protocol, UDP destination port, VXLAN flags and VNI (3 bytes + reserved). Inner: ethertype,
# version/IHL, total length, IP id, flags+fragment offset, protocol, addresses, then the TCP header.
_VXLAN_FAST = Struct("!12xHB5xHxB12xH4xB3x3sx12xHBxHHHxB2x4s4sHHIIBB")
_VXLAN_INNER = 50  # 14 + 20 + 8 + 8
_TCP_FAST_END = _VXLAN_INNER + 14 + 40
MAX_CACHED_LABELS = 4096


@dataclass
class TunnelStats:
    # packets by tunnel kind (each level); a Counter: a missing kind counts 0
    decapsulated: Counter[str] = field(default_factory=Counter)
    overhead_bytes: int = 0  # tunnel, label and inner link headers of decapsulated packets
    too_deep: int = 0  # packets nested past the depth limit


class Decapsulator:
    """Walks one frame through any tunnels, labels and fragments to its TCP segment."""

    def __init__(
        self,
        vxlan_ports: frozenset[int] = VXLAN_PORTS,
        geneve_ports: frozenset[int] = GENEVE_PORTS,
        max_depth: int = MAX_DEPTH,
        fragment_bytes: int = FRAGMENT_BYTES,
    ) -> None:
        self.vxlan_ports = vxlan_ports
        self.geneve_ports = geneve_ports
        self.max_depth = max_depth
        self.stats = TunnelStats()
        self.defrag = Defragmenter(fragment_bytes)
        self._vxlan_labels: dict[bytes, str] = {}
        self.fast_vxlan = 0  # packets taken by _vxlan_fast, not yet in stats

    def totals(self) -> TunnelStats:
        """The stats, with the packets of the VXLAN fast path counted in."""
        st = self.stats
        if self.fast_vxlan:
            st.decapsulated["vxlan"] += self.fast_vxlan
            # outer IPv4, UDP, VXLAN and the inner Ethernet header
            st.overhead_bytes += self.fast_vxlan * _VXLAN_INNER
            self.fast_vxlan = 0
        return st

    def parse(self, ts: int, linktype: int, data: bytes) -> Carried | str:
        """The TCP segment inside one captured frame, or why there is none (a SKIP_REASONS string,
        or "tunnel_too_deep")."""
        if linktype == ETHERNET:
            fast = self._vxlan_fast(data)
            if fast is not None:
                return fast
            if len(data) < 14:
                return "truncated_header"
            layer, off = self._ethertype(data, data[12] << 8 | data[13], 14)
        elif linktype in (LINUX_SLL, LINUX_SLL2):
            at, off = (14, 16) if linktype == LINUX_SLL else (0, 20)
            if len(data) < off:
                return "truncated_header"
            layer, off = self._ethertype(data, data[at] << 8 | data[at + 1], off)
        else:
            link = LINK_PARSERS.get(linktype)
            if link is None:
                return "unsupported_linktype"
            start = link(data)
            if isinstance(start, str):
                return start
            off, version = start
            layer = _IP4 if version == 4 else _IP6
        return self._walk(ts, data, layer, off)

    def _vxlan_fast(self, data: bytes) -> Carried | None:
        """The common overlay packet in one unpack, or None to take the general walk."""
        if len(data) < _TCP_FAST_END:
            return None
        (ethertype, vhl, frag, proto, udp_dport, flags, vni, inner_type, inner_vhl, total, ident, inner_frag,
         inner_proto, src, dst, sport, dport, seq, ack, doff, tflags) = _VXLAN_FAST.unpack_from(data)  # fmt: skip
        if not (
            ethertype == inner_type == 0x0800
            and vhl == inner_vhl == 0x45
            and proto == _PROTO_UDP
            and inner_proto == PROTO_TCP
            and not (frag | inner_frag) & 0x3FFF
            and flags & 0x08
            and udp_dport in self.vxlan_ports
        ):
            return None
        ip = _VXLAN_INNER + 14
        ip_end = ip + total
        start = ip + 20 + ((doff >> 2) & 0x3C)
        if start < ip + 40 or not start <= ip_end <= len(data) or self.max_depth < 1:
            return None
        label = self._vxlan_labels.get(vni)
        if label is None:
            label = f"vxlan:vni={int.from_bytes(vni, 'big')}"
            if len(self._vxlan_labels) < MAX_CACHED_LABELS:
                self._vxlan_labels[vni] = label
        self.fast_vxlan += 1  # folded into stats by totals(): one increment per packet here
        packet = (src, sport, dst, dport, seq, ack, tflags, memoryview(data)[start:ip_end], 0)
        # The duplicate key, as _payload makes it: addresses and TCP header, IP id.
        return packet, label, (data[ip + 12 : start], ident)

    def _ethertype(self, data: bytes, ethertype: int, off: int) -> tuple[int, int]:
        """(layer, offset) after any VLAN tags; layer -1 for a frame that carries no IP or MPLS."""
        while ethertype in VLAN_ETHERTYPES:
            if len(data) < off + 4:
                return -1, off
            ethertype = data[off + 2] << 8 | data[off + 3]
            off += 4
        if ethertype == ETHERTYPE_IPV4:
            return _IP4, off
        if ethertype == ETHERTYPE_IPV6:
            return _IP6, off
        if ethertype in _ETHERTYPE_MPLS:
            return _MPLS, off
        return -1, off

    def _walk(self, ts: int, data: bytes, layer: int, off: int) -> Carried | str:
        tunnels: list[str] = []
        overhead = 0
        while True:
            if layer in (_IP4, _IP6):
                step = self._ip4(ts, data, off) if layer == _IP4 else self._ip6(ts, data, off, False)
                if isinstance(step, str):
                    return step
                if len(step) == 2:  # (TcpPacket, duplicate key): the end of the walk
                    if tunnels:
                        self._count(tunnels, overhead)
                    return step[0], "/".join(tunnels), step[1]
                data, layer, off, tunnel, header_bytes = step
                tunnels.append(tunnel)
                overhead += header_bytes
            elif layer == _MPLS:
                labels: list[str] = []
                start = off
                while len(labels) < MAX_LABELS and len(data) >= off + 4:
                    labels.append(str(int.from_bytes(data[off : off + 3], "big") >> 4))
                    off += 4
                    if data[off - 2] & 1:  # bottom of stack
                        break
                else:
                    return "truncated_header"
                layer, off = _after_labels(data, off)
                overhead += off - start
                tunnels.append("mpls:label=" + ".".join(labels))
            else:
                return "not_ip"
            if layer == _ETH:
                if len(data) < off + 14:
                    return "truncated_header"
                start = off
                layer, off = self._ethertype(data, data[off + 12] << 8 | data[off + 13], off + 14)
                overhead += off - start
            if len(tunnels) > self.max_depth:
                self.stats.too_deep += 1
                return "tunnel_too_deep"

    def _count(self, tunnels: list[str], overhead: int) -> None:
        st = self.stats
        st.overhead_bytes += overhead
        for t in tunnels:
            kind = t.split(":", 1)[0]
            st.decapsulated[kind] = st.decapsulated.get(kind, 0) + 1

    # -- IP ------------------------------------------------------------------------------------------
    def _ip4(self, ts: int, data: bytes, off: int) -> _Step | str:
        if len(data) < off + 20:
            return "truncated_header"
        vhl, total, ident, frag, proto, src, dst = _IPV4.unpack_from(data, off)
        ihl = (vhl & 0x0F) * 4
        if vhl >> 4 != 4 or ihl < 20 or (total and total < ihl):
            return "bad_ip_header"
        ip_end = off + total if total else len(data)
        if frag & 0x3FFF:
            if ip_end > len(data):
                return "truncated_header"
            whole = self.defrag.add(
                ts,
                (src, dst, ident, proto),
                (frag & 0x1FFF) * 8,
                bool(frag & 0x2000),
                data[off + ihl : ip_end],
                data[off : off + ihl],
                _ipv4_header,
            )
            if whole is None:
                return "ip_fragment"
            data, off, ip_end = whole, 0, len(whole)
        return self._payload(data, off, off + ihl, ip_end, proto, src, dst, ident)

    def _ip6(self, ts: int, data: bytes, off: int, reassembled: bool) -> _Step | str:
        n = len(data)
        if n < off + 40:
            return "truncated_header"
        vtc, plen, nxt, src, dst = _IPV6.unpack_from(data, off)
        if vtc >> 4 != 6:
            return "bad_ip_header"
        ip_end = off + 40 + plen if plen else n
        pos = off + 40
        while nxt in _IPV6_WALKED:
            if pos + 8 > n:
                return "truncated_header"
            if nxt == _IPV6_FRAGMENT:
                frag = data[pos + 2] << 8 | data[pos + 3]
                if frag & 0xFFF9:
                    if reassembled:  # a fragment inside a reassembled fragment: no stack does that
                        return "bad_ip_header"
                    if ip_end > n:
                        return "truncated_header"
                    whole = self.defrag.add(
                        ts,
                        (src, dst, int.from_bytes(data[pos + 4 : pos + 8], "big"), 6),
                        frag & 0xFFF8,
                        bool(frag & 1),
                        data[pos + 8 : ip_end],
                        data[off : off + 40] + bytes((data[pos],)),
                        _ipv6_header,
                    )
                    if whole is None:
                        return "ip_fragment"
                    return self._ip6(ts, whole, 0, True)
                hdr_len = 8
            elif nxt == _IPV6_AH:
                hdr_len = (data[pos + 1] + 2) * 4
            else:
                hdr_len = (data[pos + 1] + 1) * 8
            nxt = data[pos]
            pos += hdr_len
            if pos > ip_end:
                return "bad_ip_header"
        return self._payload(data, off, pos, ip_end, nxt, src, dst, -1)

    def _payload(
        self, data: bytes, start: int, pos: int, ip_end: int, proto: int, src: bytes, dst: bytes, ident: int
    ) -> _Step | str:
        """What the IP packet at ``start`` carries at ``pos``: a TCP segment, or a tunnel to walk into."""
        if proto == PROTO_TCP:
            seg = tcp_segment(data, pos, ip_end, src, dst)
            if isinstance(seg, str):
                return seg
            # A copy of this very packet has the same addresses, IP id and TCP header (checksum and
            # timestamps included); a retransmission differs in the IP id or the TCP timestamps.
            return seg, (src + dst + data[pos : pos + ((data[pos + 12] >> 4) * 4)], ident)
        if proto == _PROTO_UDP:
            inner = self._udp(data, pos)
        elif proto == _PROTO_GRE:
            inner = _gre(data, pos)
        elif proto == _PROTO_IPIP:
            inner = _IP4, pos, "ipip"
        elif proto == _PROTO_IPV6:
            inner = _IP6, pos, "ip6ip"
        else:
            return "not_tcp"
        if isinstance(inner, str):
            return inner
        layer, at, tunnel = inner
        return data, layer, at, tunnel, at - start

    def _udp(self, data: bytes, pos: int) -> _Inner | str:
        if len(data) < pos + 16:
            return "not_tcp"
        dport = data[pos + 2] << 8 | data[pos + 3]
        p = pos + 8
        if dport in self.vxlan_ports:
            if not data[p] & 0x08:  # the I flag: a valid VNI (RFC 7348 section 5)
                return "not_tcp"
            return _ETH, p + 8, f"vxlan:vni={int.from_bytes(data[p + 4 : p + 7], 'big')}"
        if dport in self.geneve_ports:
            if data[p] >> 6:  # version 0 is the only one (RFC 8926 section 3.4)
                return "not_tcp"
            inner = p + 8 + (data[p] & 0x3F) * 4  # options, in 4-byte units
            layer = _layer_of(data[p + 2] << 8 | data[p + 3])
            if layer < 0:
                return "not_tcp"
            return layer, inner, f"geneve:vni={int.from_bytes(data[p + 4 : p + 7], 'big')}"
        return "not_tcp"


# (data, next layer, its offset, tunnel label, tunnel header bytes) to go on walking, or at the end
# (TcpPacket, duplicate key).
_Step = tuple[bytes, int, int, str, int] | tuple[TcpPacket, DuplicateKey]
# What a tunnel header announces: (next layer, its offset, tunnel label).
_Inner = tuple[int, int, str]


def _layer_of(ethertype: int) -> int:
    if ethertype == ETHERTYPE_IPV4:
        return _IP4
    if ethertype == ETHERTYPE_IPV6:
        return _IP6
    if ethertype == _ETHERTYPE_TEB:
        return _ETH
    if ethertype in _ETHERTYPE_MPLS:
        return _MPLS
    return -1


def _gre(data: bytes, pos: int) -> _Inner | str:
    if len(data) < pos + 4:
        return "truncated_header"
    flags, ptype = data[pos] << 8 | data[pos + 1], data[pos + 2] << 8 | data[pos + 3]
    if flags & 0x4007:  # source routing (RFC 1701) or a version other than 0 (PPTP's is 1)
        return "not_tcp"
    p = pos + 4 + (4 if flags & 0x8000 else 0)
    key = None
    if flags & 0x2000:
        key = int.from_bytes(data[p : p + 4], "big")
        p += 4
    if flags & 0x1000:
        p += 4
    if len(data) < p:
        return "truncated_header"
    if ptype == _ERSPAN_II:
        if not flags & 0x1000:  # type I: no sequence number and no ERSPAN header
            return _ETH, p, "erspan1"
        if len(data) < p + 8:
            return "truncated_header"
        return _ETH, p + 8, f"erspan2:session={(data[p + 2] & 0x03) << 8 | data[p + 3]}"
    if ptype == _ERSPAN_III:
        if len(data) < p + 12:
            return "truncated_header"
        # The O flag announces an 8-byte platform-specific subheader.
        inner = p + 12 + (8 if data[p + 11] & 0x01 else 0)
        return _ETH, inner, f"erspan3:session={(data[p + 2] & 0x03) << 8 | data[p + 3]}"
    layer = _layer_of(ptype)
    if layer < 0:
        return "not_tcp"
    return layer, p, "gre" if key is None else f"gre:key={key}"


def _after_labels(data: bytes, off: int) -> tuple[int, int]:
    """What follows an MPLS stack: IP by its version nibble, else an Ethernet pseudowire (RFC 4448),
    after its control word when the first nibble is 0."""
    if len(data) <= off:
        return -1, off
    nibble = data[off] >> 4
    if nibble == 4:
        return _IP4, off
    if nibble == 6:
        return _IP6, off
    if nibble == 0:
        return _ETH, off + 4
    return _ETH, off


def _ipv4_header(header: bytes, payload_len: int) -> bytes:
    # Total length for the whole datagram, flags and offset cleared (the checksum is not read).
    return header[:2] + (len(header) + payload_len).to_bytes(2, "big") + header[4:6] + b"\0\0" + header[8:]


def _ipv6_header(header: bytes, payload_len: int) -> bytes:
    # The fixed header with the fragment header's next-header and the datagram's payload length;
    # extension headers before the fragment header are not needed further down.
    return header[:4] + payload_len.to_bytes(2, "big") + header[40:41] + header[7:40]
