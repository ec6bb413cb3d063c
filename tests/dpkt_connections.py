"""TCP connections of a capture as dpkt sees them: an oracle for the `connections` table that shares
no code with kwsniff (dpkt parses the pcap, this module only counts).

The counting rule is TCP's own: a connection ends with the packet that carries the second FIN (one
from each side) or the first RST; later packets of the same endpoints (the last ACK, a
retransmission) belong to no connection unless a new SYN opens one.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from pathlib import Path

import dpkt


@dataclass
class Flow:
    client: tuple[str, int]
    broker: tuple[str, int]
    ts_first: int  # microseconds
    ts_last: int = 0
    packets: dict[str, int] = field(default_factory=lambda: {"to_broker": 0, "to_client": 0})
    payload: dict[str, int] = field(default_factory=lambda: {"to_broker": 0, "to_client": 0})
    syn: bool = False
    fins: set[str] = field(default_factory=set)
    rst: bool = False

    @property
    def closed(self) -> bool:
        return self.rst or len(self.fins) == 2


def _ip_packet(linktype: int, frame: bytes) -> dpkt.ip.IP | dpkt.ip6.IP6 | None:
    if linktype == dpkt.pcap.DLT_EN10MB:
        packet = dpkt.ethernet.Ethernet(frame).data
    elif linktype == dpkt.pcap.DLT_LINUX_SLL:
        packet = dpkt.sll.SLL(frame).data
    elif linktype == dpkt.pcap.DLT_NULL:
        packet = dpkt.loopback.Loopback(frame).data
    else:
        raise ValueError(f"linktype {linktype}")
    return packet if isinstance(packet, (dpkt.ip.IP, dpkt.ip6.IP6)) else None


def _address(packet: dpkt.ip.IP | dpkt.ip6.IP6, which: str) -> str:
    family = socket.AF_INET6 if isinstance(packet, dpkt.ip6.IP6) else socket.AF_INET
    return socket.inet_ntop(family, getattr(packet, which))


def flows(pcap: Path, broker_port: int) -> list[Flow]:
    """Every TCP connection in capture order (the order kwsniff numbers them in)."""
    done: list[Flow] = []
    live: dict[frozenset[tuple[str, int]], Flow] = {}
    with pcap.open("rb") as f:
        reader = dpkt.pcap.Reader(f)
        for ts, frame in reader:
            packet = _ip_packet(reader.datalink(), frame)
            if packet is None or not isinstance(packet.data, dpkt.tcp.TCP):
                continue
            tcp = packet.data
            src, dst = (_address(packet, "src"), tcp.sport), (_address(packet, "dst"), tcp.dport)
            key = frozenset((src, dst))
            flow = live.get(key)
            syn_only = tcp.flags & dpkt.tcp.TH_SYN and not tcp.flags & dpkt.tcp.TH_ACK
            if flow is not None and flow.closed:
                if not syn_only:
                    continue  # a late packet of a closed connection
                flow = None
            us = round(ts * 1_000_000)
            if flow is None:
                client, broker = (dst, src) if src[1] == broker_port else (src, dst)
                flow = live[key] = Flow(client, broker, us)
                done.append(flow)
            direction = "to_broker" if dst == flow.broker else "to_client"
            flow.ts_last = us
            flow.packets[direction] += 1
            flow.payload[direction] += len(tcp.data)
            flow.syn |= bool(tcp.flags & dpkt.tcp.TH_SYN)
            flow.rst |= bool(tcp.flags & dpkt.tcp.TH_RST)
            if tcp.flags & dpkt.tcp.TH_FIN:
                flow.fins.add(direction)
    return done
