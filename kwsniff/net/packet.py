"""parse_tcp: one captured frame in, one TCP segment (or the reason it is not one) out."""

from __future__ import annotations

from struct import Struct
from struct import error as StructError

from kwsniff.net.ip import PROTO_TCP, TcpPacket, tcp_in_ipv4, tcp_in_ipv6
from kwsniff.net.linktypes import ETHERNET, ETHERTYPE_IPV4, LINK_PARSERS, LINUX_SLL, NULL

# TCP header flag bits (RFC 9293 section 3.1).
FIN = 0x01
SYN = 0x02
RST = 0x04
PSH = 0x08
ACK = 0x10

SKIP_REASONS = (
    "not_ip",
    "not_tcp",
    "ip_fragment",
    "truncated_header",
    "unsupported_linktype",
    "bad_ip_header",
    "bad_tcp_offset",
    "tunnel_too_deep",
)

_ETHERNET_HEADER = 14
# Ethernet ethertype followed by IPV4_TCP (kwsniff.net.ip): the whole usual header stack in one unpack.
_ETHERNET_IPV4_TCP = Struct("!12xHBxHxxHxB2x4s4sHHIIBB")
_EMPTY = memoryview(b"")
_SLL_HEADER = 16
_NULL_HEADER = 4
# AF_INET (2) in either byte order: DLT_NULL uses the capturing host's order.
_NULL_IPV4 = frozenset((b"\x02\x00\x00\x00", b"\x00\x00\x00\x02"))


def parse_tcp(linktype: int, data: bytes) -> TcpPacket | str:
    """The TCP segment in one captured frame of the given LINKTYPE, or why there is none.

    A TcpPacket is a plain tuple, fields in this order:
    ``(src, sport, dst, dport, seq, ack, flags, payload, missing)`` where src/dst are the packed 4- or
    16-byte addresses (see format_ip), flags is the TCP flags byte (FIN, SYN, RST, PSH, ACK bits),
    payload is a memoryview over ``data`` clipped to the IP length (Ethernet padding dropped) and to what
    was captured, and missing counts payload bytes the IP header announced but the capture cut off.

    Otherwise a reason string, one of SKIP_REASONS.
    """
    # Ethernet, Linux cooked and BSD loopback carrying plain IPv4 are nearly all real traffic: test
    # for them with byte lookups and go straight to the one-unpack IPv4+TCP path.
    if linktype == ETHERNET:
        # Inlined rather than calling tcp_in_ipv4: the call alone is a fifth of the per-packet cost.
        try:
            ethertype, vhl, total, frag, proto, src, dst, sport, dport, seq, ack, doff, flags = (
                _ETHERNET_IPV4_TCP.unpack_from(data)
            )
        except StructError:
            pass  # shorter than any Ethernet/IPv4/TCP frame: the general path says why
        else:
            if ethertype == ETHERTYPE_IPV4 and vhl == 0x45 and proto == PROTO_TCP and not frag & 0x3FFF:
                ip_end = _ETHERNET_HEADER + total
                start = _ETHERNET_HEADER + 20 + ((doff >> 2) & 0x3C)
                if start >= _ETHERNET_HEADER + 40 and start <= ip_end <= len(data):
                    payload = memoryview(data)[start:ip_end] if ip_end > start else _EMPTY
                    return (src, sport, dst, dport, seq, ack, flags, payload, 0)
            elif ethertype == ETHERTYPE_IPV4 and vhl == 0x45 and not frag & 0x3FFF:
                return "not_tcp"  # UDP, GRE, IP in IP...: the caller may look inside (kwsniff.net.tunnel)
    elif linktype == LINUX_SLL:
        if len(data) > _SLL_HEADER and data[14] == 0x08 and data[15] == 0x00:
            return tcp_in_ipv4(data, _SLL_HEADER)
    elif linktype == NULL and data[:_NULL_HEADER] in _NULL_IPV4 and len(data) > _NULL_HEADER:
        return tcp_in_ipv4(data, _NULL_HEADER)
    link = LINK_PARSERS.get(linktype)
    if link is None:
        return "unsupported_linktype"
    start = link(data)
    if isinstance(start, str):
        return start
    off, version = start
    return tcp_in_ipv4(data, off) if version == 4 else tcp_in_ipv6(data, off)


__all__ = ["ACK", "FIN", "PSH", "RST", "SKIP_REASONS", "SYN", "TcpPacket", "parse_tcp"]
