"""Options more than one sub-command takes, defined once."""

from __future__ import annotations

import click

DEFAULT_BROKER_PORT = 9092

broker_port_option = click.option(
    "--broker-port",
    "-p",
    type=int,
    multiple=True,
    help=f"TCP port a broker listens on (repeatable; default {DEFAULT_BROKER_PORT}). Other ports are detected.",
)


def broker_ports(given: tuple[int, ...]) -> frozenset[int]:
    return frozenset(given or (DEFAULT_BROKER_PORT,))
