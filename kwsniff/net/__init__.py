"""Link, network and transport parsing: captured frame bytes to TCP segments. Pure; no I/O.

Public API: parse_tcp, format_ip, the TCP flag bits FIN SYN RST PSH ACK, SKIP_REASONS, TcpPacket;
for tunnels, labels and fragments Decapsulator (with its default ports) and DuplicateFilter; RECENT_FRAMES for copies of plain frames.
"""

from kwsniff.net.address import format_ip
from kwsniff.net.duplicates import COPY_WITHIN_US, NO_FRAMES, RECENT_FRAMES, DuplicateFilter
from kwsniff.net.fragments import FRAGMENT_BYTES
from kwsniff.net.ip import TcpPacket
from kwsniff.net.packet import ACK, FIN, PSH, RST, SKIP_REASONS, SYN, parse_tcp
from kwsniff.net.tunnel import GENEVE_PORTS, MAX_DEPTH, TUNNEL_KINDS, VXLAN_PORTS, Carried, Decapsulator

__all__ = [
    "ACK",
    "COPY_WITHIN_US",
    "FIN",
    "FRAGMENT_BYTES",
    "GENEVE_PORTS",
    "MAX_DEPTH",
    "NO_FRAMES",
    "PSH",
    "RECENT_FRAMES",
    "RST",
    "SKIP_REASONS",
    "SYN",
    "TUNNEL_KINDS",
    "VXLAN_PORTS",
    "Carried",
    "Decapsulator",
    "DuplicateFilter",
    "TcpPacket",
    "format_ip",
    "parse_tcp",
]
