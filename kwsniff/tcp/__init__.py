"""TCP stream reassembly, one direction of one connection at a time (no I/O)."""

from kwsniff.tcp.reassembly import (
    IMPLAUSIBLE_GAP,
    LOST_SEGMENT,
    MAX_WINDOW,
    OOO_OVERFLOW,
    SNAPLEN,
    TcpReassembler,
    seq_distance,
)

__all__ = [
    "IMPLAUSIBLE_GAP",
    "LOST_SEGMENT",
    "MAX_WINDOW",
    "OOO_OVERFLOW",
    "SNAPLEN",
    "TcpReassembler",
    "seq_distance",
]
