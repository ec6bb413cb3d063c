"""IPv4 and IPv6 headers down to the TCP segment, and the TCP header itself.

Everything returns either a TcpPacket tuple or a short skip reason; nothing raises on bad traffic.
"""

from __future__ import annotations

from struct import Struct
from struct import error as StructError

# (src, sport, dst, dport, seq, ack, flags, payload, missing); see kwsniff.net.parse_tcp.
TcpPacket = tuple[bytes, int, bytes, int, int, int, int, memoryview, int]

PROTO_TCP = 6

# IPv4 header with no options (IHL 5, by far the common case) followed by the fixed TCP header, so the
# usual packet costs a single unpack: version/IHL, total length, flags+fragment offset, protocol,
# addresses, then ports, seq, ack, data offset and flags.
IPV4_TCP = Struct("!BxHxxHxB2x4s4sHHIIBB")
_IPV4 = Struct("!BxHxxHxB2x4s4s")
_IPV6 = Struct("!BxxxHBx16s16s")
_TCP = Struct("!HHIIBB")

_EMPTY = memoryview(b"")

# IPv6 extension headers sized in 8-octet units after the first 8 (RFC 8200 section 4): hop-by-hop,
# routing, destination options, mobility (RFC 6275), HIP (RFC 7401), shim6 (RFC 5533).
_IPV6_EXT_8 = frozenset((0, 43, 60, 135, 139, 140))
_IPV6_FRAGMENT = 44
_IPV6_AH = 51  # sized in 4-octet units after the first 8 (RFC 4302 section 2.2)
_IPV6_WALKED = _IPV6_EXT_8 | {_IPV6_FRAGMENT, _IPV6_AH}


def tcp_segment(data: bytes, tcp_off: int, ip_end: int, src: bytes, dst: bytes) -> TcpPacket | str:
    """Parse the TCP header at tcp_off of an IP packet whose payload ends at ip_end (maybe past the capture)."""
    n = len(data)
    if n < tcp_off + 20:
        return "truncated_header"
    sport, dport, seq, ack, doff, flags = _TCP.unpack_from(data, tcp_off)
    hdr_len = (doff >> 4) * 4
    start = tcp_off + hdr_len
    if hdr_len < 20 or start > ip_end:
        return "bad_tcp_offset"
    if start > n:
        return "truncated_header"
    if ip_end <= n:
        end, missing = ip_end, 0
    else:
        # Snaplen cut the packet: hand on what was captured and say how much the sender really sent.
        end, missing = n, ip_end - n
    payload = memoryview(data)[start:end] if end > start else _EMPTY
    return (src, sport, dst, dport, seq, ack, flags, payload, missing)


def tcp_in_ipv4(data: bytes, off: int) -> TcpPacket | str:
    """The TCP segment of the IPv4 packet at off."""
    try:
        vhl, total, frag, proto, src, dst, sport, dport, seq, ack, doff, flags = IPV4_TCP.unpack_from(
            data, off
        )
    except StructError:
        return _tcp_in_ipv4_general(data, off)
    if vhl != 0x45 or proto != PROTO_TCP or frag & 0x3FFF:
        return _tcp_in_ipv4_general(data, off)
    ip_end = off + total
    start = off + 20 + ((doff >> 2) & 0x3C)
    if start < off + 40 or ip_end > len(data) or start > ip_end:
        return _tcp_in_ipv4_general(data, off)
    payload = memoryview(data)[start:ip_end] if ip_end > start else _EMPTY
    return (src, sport, dst, dport, seq, ack, flags, payload, 0)


def _tcp_in_ipv4_general(data: bytes, off: int) -> TcpPacket | str:
    if len(data) < off + 20:
        return "truncated_header"
    vhl, total, frag, proto, src, dst = _IPV4.unpack_from(data, off)
    ihl = (vhl & 0x0F) * 4
    if vhl >> 4 != 4 or ihl < 20:
        return "bad_ip_header"
    if total == 0:
        # TSO/BIG TCP hands the capture a packet whose length field is 0 ("may be caused by TSO",
        # as Wireshark puts it); the captured bytes are then the only length there is.
        ip_end = len(data)
    elif total < ihl:
        return "bad_ip_header"
    else:
        ip_end = off + total
    if proto != PROTO_TCP:
        return "not_tcp"
    if frag & 0x3FFF:  # more-fragments flag or a non-zero offset
        return "ip_fragment"
    return tcp_segment(data, off + ihl, ip_end, src, dst)


def tcp_in_ipv6(data: bytes, off: int) -> TcpPacket | str:
    """The TCP segment of the IPv6 packet at off, after any extension headers."""
    n = len(data)
    if n < off + 40:
        return "truncated_header"
    vtc, plen, nxt, src, dst = _IPV6.unpack_from(data, off)
    if vtc >> 4 != 6:
        return "bad_ip_header"
    # Payload length 0 means a jumbogram (RFC 2675) or a BIG TCP packet: trust the captured length.
    ip_end = off + 40 + plen if plen else n
    pos = off + 40
    while nxt != PROTO_TCP:
        if nxt not in _IPV6_WALKED:
            return "not_tcp"  # UDP, ICMPv6, ESP, no next header (59), ...
        if pos + 8 > n:
            return "truncated_header"
        if nxt in _IPV6_EXT_8:
            hdr_len = (data[pos + 1] + 1) * 8
        elif nxt == _IPV6_AH:
            hdr_len = (data[pos + 1] + 2) * 4
        else:
            # An atomic fragment (offset 0, no more fragments; RFC 6946) is a whole packet.
            if (data[pos + 2] << 8 | data[pos + 3]) & 0xFFF9:
                return "ip_fragment"
            hdr_len = 8
        nxt = data[pos]
        pos += hdr_len
        if pos > ip_end:
            return "bad_ip_header"
    return tcp_segment(data, pos, ip_end, src, dst)
