"""Options more than one sub-command takes, and the value types every command validates with."""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from kwsniff.commands import messages
from kwsniff.commands.sizes import BYTE_SIZE
from kwsniff.commands.values import BoundedInt, SmallFileError, read_small_file, seconds
from kwsniff.defaults import DEFAULT_BROKER_PORT
from kwsniff.memory import DEFAULT_MEMORY_LIMIT, FRAGMENTS, SECRETS, MemoryBudget
from kwsniff.net import GENEVE_PORTS, TUNNEL_KINDS, VXLAN_PORTS
from kwsniff.pipeline.session import SessionOptions
from kwsniff.protocol import api_names
from kwsniff.rows.brokers import BrokerDirectory


class FlowBuckets(click.ParamType):
    """`auto`, or a number of flow buckets from 1 to 4096 (returned as None for `auto`)."""

    name = "auto|N"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int | None:
        if value is None or str(value).strip().lower() == "auto":
            return None
        return _BUCKETS.convert(value, param, ctx)


_BUCKETS = BoundedInt(1, 4096)


class Port(click.ParamType):
    """A TCP port, 1 to 65535."""

    name = "port"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            self.fail(f"{value!r} is not a port number", param, ctx)
        try:
            n = int(value)
        except (TypeError, ValueError, OverflowError):  # OverflowError: int(inf)
            self.fail(f"{value!r} is not a port number", param, ctx)
        if not 1 <= n <= 65535:
            self.fail(f"{value!r} is not a TCP port (1 to 65535)", param, ctx)
        return n


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


PORT = Port()
API = ApiName()

broker_port_option = click.option(
    "--broker-port",
    "-p",
    type=PORT,
    multiple=True,
    help=f"TCP port a broker listens on (repeatable; default {DEFAULT_BROKER_PORT}). Other ports are detected.",
)


memory_limit_option = click.option(
    "--memory-limit",
    type=BYTE_SIZE,
    default=DEFAULT_MEMORY_LIMIT,
    show_default="1GiB",
    help="Memory for what grows with the traffic (connections, reassembly, held records, row "
    "buffers, the live queue); past it the oldest or largest state is evicted and counted "
    "(docs/memory.md). Bytes, or e.g. 512MiB.",
)


def idle_timeout_option(help_text: str) -> Any:
    return click.option(
        "--idle-timeout",
        type=seconds(),
        default=900.0,
        show_default=True,
        help=help_text,
    )


def broker_ports(given: tuple[int, ...]) -> frozenset[int]:
    return frozenset(given or (DEFAULT_BROKER_PORT,))


keylog_option = click.option(
    "--keylog",
    "keylog",
    multiple=True,
    # A pipe (`--keylog <(...)`) is welcome: load_keylog checks what the path is, not click.
    type=click.Path(path_type=Path),
    help="NSS key log file (SSLKEYLOGFILE format, or a pipe) to decrypt TLS connections with; "
    "repeatable. Keys in a pcapng Decryption Secrets Block are used without it. Its secrets never "
    "reach any output, and are held within the secrets share of --memory-limit.",
)


def with_keylog(options: SessionOptions, paths: tuple[Path, ...], follow: bool = False) -> SessionOptions:
    """``options`` with the secrets of the `--keylog` files (followed as they grow, for live capture);
    a file that cannot be read is one line and exit status 1."""
    if not paths:
        return options
    from kwsniff.pipeline.keylogs import KeyLogError, follow_keylog, load_keylog

    cap = MemoryBudget(options.memory_limit).cap(SECRETS)
    try:
        keys = follow_keylog(paths, cap) if follow else load_keylog(paths, cap)
    except KeyLogError as exc:
        messages.error(str(exc))
        sys.exit(1)
    return dataclasses.replace(options, keylog=keys)


class TunnelPort(click.ParamType):
    """`KIND=PORT`: a UDP port carrying a tunnel kind (vxlan or geneve)."""

    name = "kind=port"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> tuple[str, int]:
        if isinstance(value, tuple):
            return value
        kind, _, port = str(value).partition("=")
        kind = kind.strip().lower()
        if kind not in TUNNEL_KINDS or not port.strip().isdigit() or not 1 <= int(port) <= 65535:
            self.fail(f"{value!r} is not KIND=PORT with KIND one of {', '.join(TUNNEL_KINDS)}", param, ctx)
        return kind, int(port)


TUNNEL_PORT = TunnelPort()


def tunnel_settings(
    vxlan_port: tuple[int, ...],
    geneve_port: tuple[int, ...],
    tunnel_port: tuple[tuple[str, int], ...],
    fragment_memory: int | None,
) -> dict[str, Any]:
    """The SessionOptions keywords of --vxlan-port, --geneve-port, --tunnel-port, --fragment-memory."""
    vxlan = set(vxlan_port) | {p for k, p in tunnel_port if k == "vxlan"}
    geneve = set(geneve_port) | {p for k, p in tunnel_port if k == "geneve"}
    return {
        "vxlan_ports": frozenset(vxlan) if vxlan else VXLAN_PORTS,
        "geneve_ports": frozenset(geneve) if geneve else GENEVE_PORTS,
        "fragment_bytes": fragment_memory,  # None: the fragments' share of --memory-limit (decoding_options)
    }


def tunnel_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """--vxlan-port, --geneve-port, --tunnel-port, --fragment-memory, handed to the command as one
    ``tunnels`` argument: the SessionOptions keywords they set."""

    @functools.wraps(command)
    def run(
        *args: Any,
        vxlan_port: tuple[int, ...],
        geneve_port: tuple[int, ...],
        tunnel_port: tuple[tuple[str, int], ...],
        fragment_memory: int | None,
        **kwargs: Any,
    ) -> Any:
        tunnels = tunnel_settings(vxlan_port, geneve_port, tunnel_port, fragment_memory)
        return command(*args, tunnels=tunnels, **kwargs)

    defaults = {"vxlan": VXLAN_PORTS, "geneve": GENEVE_PORTS}
    for kind in reversed(TUNNEL_KINDS):
        run = click.option(
            f"--{kind}-port",
            type=PORT,
            multiple=True,
            help=f"UDP port of {kind} tunnels to look inside (repeatable; replaces the default "
            f"{', '.join(map(str, sorted(defaults[kind])))}).",
        )(run)
    run = click.option(
        "--tunnel-port",
        type=TUNNEL_PORT,
        multiple=True,
        help="A tunnel UDP port as KIND=PORT, KIND vxlan or geneve, e.g. vxlan=4790 (repeatable).",
    )(run)
    return click.option(
        "--fragment-memory",
        type=BYTE_SIZE,
        default=None,
        show_default="--memory-limit / 32",
        help="Most bytes of IP fragments held for reassembly, at most the fragments share of "
        "--memory-limit (1/32); the oldest datagrams are evicted and counted.",
    )(run)


# The largest --broker-map read: some 150,000 lines of `HOST:PORT NODE_ID`, far more brokers than
# any fleet has; a bigger file (or /dev/zero) is refused before it fills memory.
BROKER_MAP_MAX_BYTES = 4 * 1024 * 1024


class BrokerMapFile(click.ParamType):
    """A --broker-map file: lines `HOST:PORT NODE_ID` (HOST an IP address, `[v6]` in brackets, or a
    name, resolved once here with the system's resolver), `#` comments and blank lines; converted to
    {(address, port): node id}. A line kwsniff cannot use fails the option, naming the line."""

    name = "file"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> dict[tuple[str, int], int]:
        if isinstance(value, dict):
            return value
        if not isinstance(value, str | os.PathLike):
            self.fail(f"{value!r} is not a file name", param, ctx)
        try:
            lines = read_small_file(value, BROKER_MAP_MAX_BYTES).decode("utf-8").splitlines()
        except SmallFileError as exc:
            self.fail(str(exc), param, ctx)
        except UnicodeDecodeError as exc:
            self.fail(f"{value}: {exc}", param, ctx)
        out: dict[tuple[str, int], int] = {}
        for number, line in enumerate(lines, 1):
            text = line.split("#", 1)[0].strip()
            if not text:
                continue
            try:
                for endpoint in _map_line(text):
                    node = endpoint[2]
                    known = out.setdefault(endpoint[:2], node)
                    if known != node:
                        raise ValueError(f"{endpoint[0]}:{endpoint[1]} is node {known} on an earlier line")
            except ValueError as exc:
                self.fail(f"{value}:{number}: {exc} (lines are HOST:PORT NODE_ID)", param, ctx)
        return out


def _map_line(text: str) -> list[tuple[str, int, int]]:
    """The (address, port, node id) of each address one --broker-map line names."""
    import socket

    from kwsniff.rows.brokers import ip_literal

    parts = text.split()
    if len(parts) != 2:
        raise ValueError(f"{text!r} is not two fields")
    where, node_text = parts
    host, sep, port_text = where.rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ValueError(f"{where!r} is not HOST:PORT")
    try:
        node = int(node_text)
    except ValueError:
        raise ValueError(f"{node_text!r} is not a node id") from None
    if not 0 <= node < 2**31:
        raise ValueError(f"{node_text!r} is not a node id (0 to 2147483647)")
    port = int(port_text)
    address = ip_literal(host)
    if address is not None:
        return [(address, port, node)]
    if host.startswith("["):
        raise ValueError(f"{host!r} is not an IP address")
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise ValueError(f"{host} does not resolve ({exc}); write its address instead") from None
    return sorted({(ip_literal(info[4][0]) or str(info[4][0]), port, node) for info in found})


BROKER_MAP = BrokerMapFile()

broker_map_option = click.option(
    "--broker-map",
    type=BROKER_MAP,
    default=None,
    help="File of `HOST:PORT NODE_ID` lines naming brokers' node ids (HOST an address, or a name "
    "resolved when the file is read; `#` comments), for broker_id where the capture cannot tell "
    '(docs/tables.md, "Which broker answered").',
)


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
    def run(
        *args: Any,
        keylog: tuple[Path, ...],
        tunnels: dict,
        memory_limit: int,
        broker_map: dict[tuple[str, int], int] | None,
        **kwargs: Any,
    ) -> Any:
        return command(*args, decoding=decoding(keylog, tunnels, memory_limit, broker_map), **kwargs)

    return keylog_option(tunnel_options(memory_limit_option(broker_map_option(run))))


def decoding(
    keylog: tuple[Path, ...],
    tunnels: dict[str, Any],
    memory_limit: int,
    broker_map: dict[tuple[str, int], int] | None = None,
) -> Decoding:
    """The Decoding those options ask for: --fragment-memory defaults to the fragments share of
    --memory-limit, and more than that share is refused (click.BadParameter)."""
    share = MemoryBudget(memory_limit).cap(FRAGMENTS)
    asked = tunnels["fragment_bytes"]
    if asked is not None and asked > share:
        raise click.BadParameter(
            f"{asked:,} bytes is more than the fragments share of --memory-limit "
            f"({share:,} bytes, 1/32 of it): raise --memory-limit or ask for less",
            param_hint="--fragment-memory",
        )
    fragments = share if asked is None else asked
    return Decoding(keylog, {**tunnels, "fragment_bytes": fragments}, memory_limit, dict(broker_map or {}))


def session_options(decoding: Decoding, *, follow_keylog: bool = False, **fields: Any) -> SessionOptions:
    """The SessionOptions of ``decoding`` and the command's own ``fields``, with the secrets of the
    --keylog files (followed as they grow for live capture; a file that cannot be read is one line
    and exit status 1)."""
    # One directory of broker node ids for the whole run (kwsniff.rows.brokers), --broker-map's fixed.
    brokers = BrokerDirectory(fixed=dict(decoding.broker_map))
    options = SessionOptions(
        **decoding.tunnels, memory_limit=decoding.memory_limit, brokers=brokers, **fields
    )
    return with_keylog(options, decoding.keylog, follow_keylog)
