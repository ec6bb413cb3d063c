"""Options more than one sub-command takes, and the value types every command validates with."""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from kwsniff.commands import messages
from kwsniff.commands.fields import gathered, options_of
from kwsniff.commands.sizes import BYTE_SIZE
from kwsniff.commands.values import BROKER_MAP, PORT, TUNNEL_PORT, BoundedInt, Port, TunnelPort
from kwsniff.core import decoding as core
from kwsniff.core.decoding import broker_ports
from kwsniff.core.options import DecodingOptions, ReadOptions
from kwsniff.core.values import BadValue
from kwsniff.pipeline.session import SessionOptions
from kwsniff.protocol import api_names

__all__ = [
    "API",
    "BROKER_MAP",
    "BYTE_SIZE",
    "PORT",
    "TUNNEL_PORT",
    "Decoding",
    "FlowBuckets",
    "Port",
    "TunnelPort",
    "broker_port_option",
    "broker_ports",
    "decoding_options",
    "idle_timeout_option",
    "session_options",
]


class FlowBuckets(click.ParamType):
    """`auto`, or a number of flow buckets from 1 to 4096 (returned as None for `auto`)."""

    name = "auto|N"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int | None:
        if value is None or str(value).strip().lower() == "auto":
            return None
        return _BUCKETS.convert(value, param, ctx)


_BUCKETS = BoundedInt(1, 4096)


class ApiName(click.ParamType):
    """A Kafka API by name (any case) or key number; converted to its lower-case name."""

    name = "api"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        names = api_names()
        text = str(value).strip()
        if text.isdigit() and int(text) in names:
            return names[int(text)].lower()
        if text.lower() in {n.lower() for n in names.values()}:
            return text.lower()
        self.fail(f"{value!r} is not a Kafka API name or key (e.g. Produce, fetch, 3)", param, ctx)


API = ApiName()

# The options of kwsniff.core.options, as click options of the commands that take them.
broker_port_option = options_of(DecodingOptions, "broker_port")
DECODING = (
    "keylog",
    "fragment_memory",
    "tunnel_port",
    "vxlan_port",
    "geneve_port",
    "memory_limit",
    "broker_map",
)


def idle_timeout_option(help_text: str) -> Any:
    """--idle-timeout, with the command's own words for what it does."""
    return options_of(ReadOptions, "idle_timeout", idle_timeout=help_text)


@dataclasses.dataclass(frozen=True)
class Decoding:
    """What the options every decoding command takes asked for: --keylog, the tunnel options
    (--vxlan-port, --geneve-port, --tunnel-port, --fragment-memory), --memory-limit and --broker-map."""

    keylog: tuple[Path, ...]
    tunnels: dict[str, Any]  # the SessionOptions keywords the tunnel options set
    memory_limit: int
    broker_map: dict[tuple[str, int], int] = dataclasses.field(default_factory=dict)


def decoding_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """--keylog, the tunnel options, --memory-limit and --broker-map, handed to the command as one
    ``decoding`` argument (a Decoding), which :func:`session_options` turns into the session's options."""

    @functools.wraps(command)
    def run(*args: Any, decoding_options: DecodingOptions, **kwargs: Any) -> Any:
        return command(*args, decoding=decoding(decoding_options), **kwargs)

    return gathered(DecodingOptions, "decoding_options", *DECODING)(run)


def decoding(options: DecodingOptions) -> Decoding:
    """The Decoding those options ask for: --fragment-memory defaults to the fragments share of
    --memory-limit, and more than that share is refused (click.BadParameter)."""
    try:
        tunnels = core.tunnel_settings(options)
    except BadValue as exc:
        raise click.BadParameter(str(exc), param_hint="--fragment-memory") from None
    return Decoding(options.keylog, tunnels, options.memory_limit, dict(options.broker_map or {}))


def session_options(decoding: Decoding, *, follow_keylog: bool = False, **fields: Any) -> SessionOptions:
    """The SessionOptions of ``decoding`` and the command's own ``fields``, with the secrets of the
    --keylog files (followed as they grow for live capture; a file that cannot be read is one line
    and exit status 1)."""
    from kwsniff.pipeline.keylogs import KeyLogError

    options = core.session_options(decoding.tunnels, decoding.memory_limit, decoding.broker_map, **fields)
    try:
        return core.with_keylog(options, decoding.keylog, follow_keylog)
    except KeyLogError as exc:
        messages.error(str(exc))
        sys.exit(1)
