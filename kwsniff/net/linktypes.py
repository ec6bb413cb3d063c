"""Link-layer headers: find where the IP packet starts inside a captured frame.

Numbers are LINKTYPE values from the pcap/pcapng specs (tcpdump.org/linktypes.html), which is what
capture files store; DLT_RAW appears as 12 or 14 in old files because BSDs disagreed on its value.
"""

from __future__ import annotations

ETHERNET = 1
RAW_DLT12 = 12
RAW_DLT14 = 14
RAW = 101
LOOP = 108
LINUX_SLL = 113
IPV4 = 228
IPV6 = 229
LINUX_SLL2 = 276
NULL = 0

ETHERTYPE_IPV4 = 0x0800
ETHERTYPE_IPV6 = 0x86DD
# 802.1Q customer tag, 802.1ad service tag, and the pre-standard QinQ tag some switches still emit;
# any number of them may be stacked before the real ethertype.
VLAN_ETHERTYPES = frozenset((0x8100, 0x88A8, 0x9100))

# BSD loopback stores the socket address family; IPv6's AF_INET6 differs per OS
# (24 NetBSD/OpenBSD, 28 FreeBSD, 30 macOS), so a capture may carry any of them.
_AF_IPV4 = 2
_AF_IPV6 = frozenset((24, 28, 30))

# Link-layer outcome: (offset of the IP header, IP version 4 or 6), or a skip reason.
IpStart = tuple[int, int] | str


def ip_after_ethertype(data: bytes, ethertype: int, off: int) -> IpStart:
    """Skip any stack of VLAN tags after an ethertype field and return where IP begins."""
    while ethertype in VLAN_ETHERTYPES:
        if len(data) < off + 4:
            return "truncated_header"
        ethertype = data[off + 2] << 8 | data[off + 3]
        off += 4
    if ethertype == ETHERTYPE_IPV4:
        return off, 4
    if ethertype == ETHERTYPE_IPV6:
        return off, 6
    return "not_ip"


def ethernet(data: bytes) -> IpStart:
    if len(data) < 14:
        return "truncated_header"
    return ip_after_ethertype(data, data[12] << 8 | data[13], 14)


def linux_sll(data: bytes) -> IpStart:
    # SLL v1: packet type, ARPHRD type, address length, 8 address bytes, then the protocol.
    if len(data) < 16:
        return "truncated_header"
    return ip_after_ethertype(data, data[14] << 8 | data[15], 16)


def linux_sll2(data: bytes) -> IpStart:
    # SLL2 moves the protocol to the front and grows the header to 20 bytes.
    if len(data) < 20:
        return "truncated_header"
    return ip_after_ethertype(data, data[0] << 8 | data[1], 20)


def raw_ip(data: bytes) -> IpStart:
    """Raw IP without a link header: the version nibble says which IP it is."""
    if not data:
        return "truncated_header"
    version = data[0] >> 4
    if version == 4 or version == 6:
        return 0, version
    return "not_ip"


def raw_ipv4(data: bytes) -> IpStart:
    return 0, 4


def raw_ipv6(data: bytes) -> IpStart:
    return 0, 6


def _family(af: int) -> IpStart:
    if af == _AF_IPV4:
        return 4, 4
    if af in _AF_IPV6:
        return 4, 6
    return "not_ip"


def bsd_null(data: bytes) -> IpStart:
    # DLT_NULL writes the family in the capturing host's byte order, which the file does not record;
    # families are small, so whichever reading fits in 16 bits is the right one.
    if len(data) < 4:
        return "truncated_header"
    af = int.from_bytes(data[:4], "little")
    if af > 0xFFFF:
        af = int.from_bytes(data[:4], "big")
    return _family(af)


def openbsd_loop(data: bytes) -> IpStart:
    # DLT_LOOP is DLT_NULL with the family always in network byte order.
    if len(data) < 4:
        return "truncated_header"
    return _family(int.from_bytes(data[:4], "big"))


LINK_PARSERS = {
    ETHERNET: ethernet,
    LINUX_SLL: linux_sll,
    LINUX_SLL2: linux_sll2,
    RAW: raw_ip,
    RAW_DLT12: raw_ip,
    RAW_DLT14: raw_ip,
    IPV4: raw_ipv4,
    IPV6: raw_ipv6,
    NULL: bsd_null,
    LOOP: openbsd_loop,
}
