"""Link, network and transport parsing: captured frame bytes to TCP segments. Pure; no I/O.

Public API: parse_tcp, format_ip, the TCP flag bits FIN SYN RST PSH ACK, SKIP_REASONS, TcpPacket.
"""

from kwsniff.net.address import format_ip
from kwsniff.net.ip import TcpPacket
from kwsniff.net.packet import ACK, FIN, PSH, RST, SKIP_REASONS, SYN, parse_tcp

__all__ = ["ACK", "FIN", "PSH", "RST", "SKIP_REASONS", "SYN", "TcpPacket", "format_ip", "parse_tcp"]
