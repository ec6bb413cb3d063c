"""The decoder's options (kwsniff.pipeline.session.SessionOptions) from the options a door was given
(kwsniff.core.options): the tunnels and their fragments' memory, the broker ports and map, the key logs."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from kwsniff.core.options import DecodingOptions, ReadOptions
from kwsniff.core.values import BadValue
from kwsniff.defaults import DEFAULT_BROKER_PORT
from kwsniff.memory import FRAGMENTS, SECRETS, MemoryBudget
from kwsniff.net import GENEVE_PORTS, VXLAN_PORTS
from kwsniff.pipeline.session import SessionOptions
from kwsniff.rows.brokers import BrokerDirectory


def tunnel_settings(options: DecodingOptions) -> dict[str, Any]:
    """The SessionOptions keywords of --vxlan-port, --geneve-port, --tunnel-port, --fragment-memory:
    --fragment-memory defaults to the fragments share of --memory-limit, and more than that share
    is refused (BadValue)."""
    vxlan = set(options.vxlan_port) | {p for k, p in options.tunnel_port if k == "vxlan"}
    geneve = set(options.geneve_port) | {p for k, p in options.tunnel_port if k == "geneve"}
    share = MemoryBudget(options.memory_limit).cap(FRAGMENTS)
    asked = options.fragment_memory
    if asked is not None and asked > share:
        raise BadValue(
            f"{asked:,} bytes is more than the fragments share of --memory-limit "
            f"({share:,} bytes, 1/32 of it): raise --memory-limit or ask for less"
        )
    return {
        "vxlan_ports": frozenset(vxlan) if vxlan else VXLAN_PORTS,
        "geneve_ports": frozenset(geneve) if geneve else GENEVE_PORTS,
        "fragment_bytes": share if asked is None else asked,
    }


def broker_ports(given: tuple[int, ...]) -> frozenset[int]:
    return frozenset(given or (DEFAULT_BROKER_PORT,))


def read_fields(options: ReadOptions) -> dict[str, Any]:
    """The SessionOptions keywords of `read`'s own decoding options (the API's too)."""
    return {
        "idle_timeout_us": int(options.idle_timeout * 1_000_000),
        "broker_ports": broker_ports(options.broker_port),
        "auto_detect": not options.no_auto_detect,
        "max_frame_size": options.max_frame_size,
        "records": options.records or options.record_payloads,
        "record_payloads": options.record_payloads,
        "max_decompressed": options.max_decompressed,
    }


def session_options(
    tunnels: dict[str, Any], memory_limit: int, broker_map: dict[tuple[str, int], int] | None, **fields: Any
) -> SessionOptions:
    """The SessionOptions of the tunnel settings, --memory-limit, --broker-map and a command's own fields."""
    # One directory of broker node ids for the whole run (kwsniff.rows.brokers), --broker-map's fixed.
    brokers = BrokerDirectory(fixed=dict(broker_map or {}))
    return SessionOptions(**tunnels, memory_limit=memory_limit, brokers=brokers, **fields)


def with_keylog(options: SessionOptions, paths: tuple[Path, ...], follow: bool = False) -> SessionOptions:
    """``options`` with the secrets of the `--keylog` files (followed as they grow, for live
    capture); a file that cannot be read raises KeyLogError."""
    if not paths:
        return options
    from kwsniff.pipeline.keylogs import follow_keylog, load_keylog

    cap = MemoryBudget(options.memory_limit).cap(SECRETS)
    keys = follow_keylog(paths, cap) if follow else load_keylog(paths, cap)
    return dataclasses.replace(options, keylog=keys)


def read_session_options(options: ReadOptions) -> SessionOptions:
    """The SessionOptions of `read` (the API's too), the key logs loaded: BadValue for
    --fragment-memory, KeyLogError for a key log that cannot be read."""
    fields = read_fields(options)
    decoded = session_options(tunnel_settings(options), options.memory_limit, options.broker_map, **fields)
    return with_keylog(decoded, options.keylog)
