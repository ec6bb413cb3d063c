"""Packed IP addresses to text, done once per connection rather than per packet."""

from __future__ import annotations

import ipaddress


def format_ip(address: bytes) -> str:
    """'10.0.0.1' for 4 bytes, RFC 5952 compressed form ('::1') for 16; ValueError for any other length."""
    return str(ipaddress.ip_address(bytes(address)))
