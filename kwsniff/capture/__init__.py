"""Capture-file sources: pcap and pcapng (plain or compressed by gzip, zstd, lz4 or xz) to (ts_us, linktype, data) packets.

This is an edge layer: it reads files, and hands the protocol core nothing but bytes and numbers.
"""

from kwsniff.capture.reader import CaptureError, CaptureReader
from kwsniff.capture.source import STDIN, check_capture, open_capture, open_capture_file, open_stream

__all__ = [
    "STDIN",
    "CaptureError",
    "CaptureReader",
    "check_capture",
    "open_capture",
    "open_capture_file",
    "open_stream",
]
