"""Which Apache Kafka release first refuses a request version or a record format.

The data is generated with the schema set (tools/gen_schema.py REMOVALS, checked against the newest
specs' minimum versions), never taken from a broker's ApiVersions: Kafka 4 brokers still advertise
Produce v0-v2 and refuse them (KAFKA-18659).
"""

from __future__ import annotations

from typing import Any, cast

from kwsniff.protocol import _schema


def _by_version() -> dict[tuple[int, int], str]:
    table: dict[tuple[int, int], str] = {}
    for key, ranges in cast(dict[int, Any], _schema.REMOVED_IN).items():
        for lo, hi, release in ranges:
            for version in range(lo, hi + 1):
                table[key, version] = release
    return table


_REMOVED_IN = _by_version()
_REMOVED_MAGIC: dict[int, str] = dict(_schema.REMOVED_MAGIC)


def removed_in(api_key: int, api_version: int) -> str | None:
    """The first release whose brokers refuse this request version ("4.0"); None while all accept it."""
    return _REMOVED_IN.get((api_key, api_version))


def magic_removed_in(magic: int | None) -> str | None:
    """The first release whose brokers refuse produced record sets of this magic (KIP-724: 0 and 1)."""
    return None if magic is None else _REMOVED_MAGIC.get(magic)
