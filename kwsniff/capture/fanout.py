"""The AF_PACKET fanout group of `capture --workers N`: which worker each packet goes to.

The kernel's own flow hash (PACKET_FANOUT_HASH) covers the outermost headers only. A VXLAN or Geneve
VTEP picks the outer UDP source port per inner flow and per direction (RFC 7348 section 5, RFC 8926
section 3.3), so the two directions of one TCP connection inside a tunnel could reach two workers,
each then seeing half of it. The group is therefore PACKET_FANOUT_CBPF, steered by the classic BPF
program below, which the kernel runs on every packet (before any worker's own filter); its return
value is the worker's slot in the group, already taken modulo the number of workers N, so a slot
keeps its connections while the group briefly holds more members (a worker started in place of a
dead one joins before the dead one's socket is closed: kwsniff.pipeline.run_workers):

- TCP over IPv4 or IPv6: the sum of the two addresses and of the two ports, the same both ways, so
  every connection stays whole on one worker and connections spread over the workers.
- Any other IP packet (UDP tunnel carriers, GRE, IP-in-IP, ESP, a TCP packet behind IPv6 extension
  headers or an IPv4 fragment): the sum of the outer addresses only. A tunnel's outer address pair
  is the same both ways for a pair of nodes, so every connection inside it stays on one worker;
  the balance is then per node pair.
- Not IP: worker 0. The kernel has already removed one 802.1Q tag by then (skb_vlan_untag, before
  packet taps), so a singly tagged frame is IP here; a frame with a second tag (QinQ) is not, and
  goes to worker 0.

Loads are relative to the network header (SKF_NET_OFF): a received frame's link header has been
pulled by then and a sent one's has not, but both have their network header set.
"""

from __future__ import annotations

import ctypes
import socket
from struct import Struct

# linux/if_packet.h
SOL_PACKET = 263
PACKET_FANOUT = 18
PACKET_FANOUT_DATA = 22  # the group's steering program, a struct sock_fprog
PACKET_FANOUT_CBPF = 6  # steered by a classic BPF program (Linux 4.3+)
# Reassemble IPv4 fragments before steering: a fragment other than the first has no ports, and it
# must reach its datagram's worker (the socket receives the reassembled datagram).
PACKET_FANOUT_FLAG_DEFRAG = 0x8000

# linux/bpf_common.h and linux/filter.h: opcode = class | size | mode (loads) or class | op | source.
LD, LDX, ST, ALU, JMP, RET, MISC = 0x00, 0x01, 0x02, 0x04, 0x05, 0x06, 0x07
W, H, B = 0x00, 0x08, 0x10
ABS, IND, MEM, MSH = 0x20, 0x40, 0x60, 0xA0
ADD, MUL, RSH, MOD = 0x00, 0x20, 0x70, 0x90
JA, JEQ, JSET = 0x00, 0x10, 0x40
K, X = 0x00, 0x08  # operand: the constant k, or register X
RET_A = 0x10
TAX = 0x00
SKF_AD_PROTOCOL = -0x1000  # SKF_AD_OFF + SKF_AD_PROTOCOL: skb->protocol, the ethertype
NET = -0x100000  # SKF_NET_OFF: offsets from the network header

ETH_P_IP, ETH_P_IPV6 = 0x0800, 0x86DD
IPPROTO_TCP = 6
GOLDEN = 0x9E3779B1  # 2^32 / phi: multiplying spreads the sum's low bits into the kept high ones

_INSN = Struct("=HBBI")  # struct sock_filter: code, jt, jf, k
_FPROG = Struct("@HP")  # struct sock_fprog: len, then a pointer (aligned as the C struct is)


class Program:
    """A tiny classic BPF assembler: instructions in order, forward jumps to named labels."""

    def __init__(self) -> None:
        self.insns: list[tuple[int, str | None, str | None, int]] = []
        self.labels: dict[str, int] = {}

    def op(self, code: int, k: int = 0) -> None:
        self.insns.append((code, None, None, k))

    def jump(self, code: int, k: int, true: str | None, false: str | None = None) -> None:
        """A conditional jump; a label of None goes on to the next instruction."""
        self.insns.append((JMP | code | K, true, false, k))

    def label(self, name: str) -> None:
        self.labels[name] = len(self.insns)

    def code(self) -> bytes:
        out = []
        for i, (code, true, false, k) in enumerate(self.insns):
            jt = self._offset(i, true)
            jf = self._offset(i, false)
            if code == JMP | JA:  # an unconditional jump's offset is k
                k, jt = jt, 0
            out.append(_INSN.pack(code, jt, jf, k & 0xFFFFFFFF))
        return b"".join(out)

    def _offset(self, i: int, label: str | None) -> int:
        if label is None:
            return 0
        offset = self.labels[label] - i - 1
        if not 0 <= offset <= 255:
            raise ValueError(f"jump to {label} out of reach ({offset})")
        return offset


def _sum_ports(p: Program, sport: int, dport: int, indexed: bool) -> None:
    """A = M[0] + the two TCP ports; offsets from the network header, plus X when ``indexed``."""
    mode = IND if indexed else ABS
    p.op(LD | H | mode, NET + sport)
    p.op(ST, 1)
    p.op(LD | H | mode, NET + dport)
    p.op(LDX | W | MEM, 1)
    p.op(ALU | ADD | X)
    p.op(LDX | W | MEM, 0)
    p.op(ALU | ADD | X)


def steering_program(workers: int) -> Program:
    """The flow-symmetric worker choice (module docstring) among ``workers`` slots; M[0] holds the
    sum of the addresses."""
    p = Program()
    p.op(LD | W | ABS, SKF_AD_PROTOCOL)
    p.jump(JEQ, ETH_P_IP, "ipv4")
    p.jump(JEQ, ETH_P_IPV6, "ipv6")
    p.op(RET | K, 0)  # not IP

    p.label("ipv4")
    p.op(LD | W | ABS, NET + 12)  # source address
    p.op(MISC | TAX)
    p.op(LD | W | ABS, NET + 16)  # destination address
    p.op(ALU | ADD | X)
    p.op(ST, 0)
    p.op(LD | B | ABS, NET + 9)  # protocol
    p.jump(JEQ, IPPROTO_TCP, None, "addresses")
    p.op(LD | H | ABS, NET + 6)  # flags and fragment offset
    p.jump(JSET, 0x3FFF, "addresses")  # a fragment (more to come, or not the first): no ports in all
    p.op(LDX | B | MSH, NET + 0)  # X = 4 * the header length field: the TCP header's offset
    _sum_ports(p, 0, 2, indexed=True)
    p.jump(JA, 0, "hash")

    p.label("ipv6")
    p.op(LD | W | ABS, NET + 8)  # the source and destination addresses: 8 words from offset 8
    for offset in range(12, 40, 4):
        p.op(MISC | TAX)
        p.op(LD | W | ABS, NET + offset)
        p.op(ALU | ADD | X)
    p.op(ST, 0)
    p.op(LD | B | ABS, NET + 6)  # next header; extension headers are not walked
    p.jump(JEQ, IPPROTO_TCP, None, "addresses")
    _sum_ports(p, 40, 42, indexed=False)
    p.jump(JA, 0, "hash")

    p.label("addresses")
    p.op(LD | W | MEM, 0)
    p.label("hash")
    p.op(ALU | MUL | K, GOLDEN)
    p.op(ALU | RSH | K, 16)
    # The slot: the kernel takes the value modulo the number of members again, which leaves it as
    # it is while the group has at least ``workers`` members.
    p.op(ALU | MOD | K, workers)
    p.op(RET | RET_A)
    return p


def fanout_option(group: int) -> bytes:
    """PACKET_FANOUT's value: group ``group`` (16 bits) steered by the program, defragmenting."""
    mode = PACKET_FANOUT_CBPF | PACKET_FANOUT_FLAG_DEFRAG
    return Struct("=I").pack((group & 0xFFFF) | (mode << 16))  # unsigned: the flag is the top bit


def set_steering(sock: socket.socket, workers: int) -> None:
    """Give the group of ``sock`` (a socket.socket that joined it) the steering program for
    ``workers`` slots; every member sets the same one. OSError if the kernel refuses it."""
    code = steering_program(workers).code()
    insns = ctypes.create_string_buffer(code, len(code))  # kept alive until the kernel copied it
    fprog = _FPROG.pack(len(code) // _INSN.size, ctypes.addressof(insns))
    sock.setsockopt(SOL_PACKET, PACKET_FANOUT_DATA, fprog)
