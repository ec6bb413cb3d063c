"""TCP stream reassembly, one direction of one connection at a time (no I/O)."""

from kwsniff.tcp.reassembly import LOST_SEGMENT, OOO_OVERFLOW, SNAPLEN, TcpReassembler, seq_distance

__all__ = ["LOST_SEGMENT", "OOO_OVERFLOW", "SNAPLEN", "TcpReassembler", "seq_distance"]
