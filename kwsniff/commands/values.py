"""The number option types of the commands: click's view of the checks in kwsniff.core.values (which
also check the Python API's keywords), so both doors refuse a value with the same words."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from kwsniff.core.values import (
    INT64_MAX,
    MAX_SECONDS,
    BadValue,
    Number,
    SmallFileError,
    Whole,
    broker_map,
    duration,
    port,
    read_small_file,
    tunnel_port,
)

__all__ = [
    "BROKER_MAP",
    "PORT",
    "TUNNEL_PORT",
    "BrokerMapFile",
    "Checked",
    "Duration",
    "Port",
    "TunnelPort",
    "checked",
    "INT64_MAX",
    "MAX_SECONDS",
    "BoundedInt",
    "FiniteFloat",
    "SmallFileError",
    "read_small_file",
    "seconds",
]


class FiniteFloat(click.FloatRange):
    """A finite number in a range (kwsniff.core.values.Number); a FloatRange for click's --help."""

    name = "number"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return Number(self.min, self.max, low_open=self.min_open)(value)
        except BadValue as exc:
            self.fail(str(exc), param, ctx)


class BoundedInt(click.IntRange):
    """A whole number in a range (kwsniff.core.values.Whole); an IntRange for click's --help."""

    name = "integer"

    def __init__(self, min: int | None = None, max: int | None = None) -> None:  # noqa: A002 - click's names
        super().__init__(min=min, max=INT64_MAX if max is None else max)
        self.check = Whole(min, max)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return self.check(value)
        except BadValue as exc:
            self.fail(str(exc), param, ctx)

    def _describe_range(self) -> str:
        return self.check.described()


def seconds(*, zero: bool = True) -> FiniteFloat:
    """Seconds, 0 (when ``zero``) or more, up to MAX_SECONDS."""
    return FiniteFloat(min=0, min_open=not zero, max=MAX_SECONDS)


def checked(
    check: Callable[[Any], Any], value: Any, param: click.Parameter | None, ctx: click.Context | None
) -> Any:
    """``value`` through a check of kwsniff.core.values; what it refuses, as click says it."""
    try:
        return check(value)
    except BadValue as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


class Duration(click.ParamType):
    """A length of time with a unit (`7d`, `12h`, `30m`, `90s`), in seconds (kwsniff.core.values.duration)."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        return float(checked(duration, value, param, ctx))


class Port(click.ParamType):
    """A TCP port, 1 to 65535."""

    name = "port"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        return checked(port, value, param, ctx)


PORT = Port()


class TunnelPort(click.ParamType):
    """`KIND=PORT`: a UDP port carrying a tunnel kind (vxlan or geneve)."""

    name = "kind=port"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> tuple[str, int]:
        return checked(tunnel_port, value, param, ctx)


TUNNEL_PORT = TunnelPort()


class BrokerMapFile(click.ParamType):
    """A --broker-map file: lines `HOST:PORT NODE_ID` (HOST an IP address, `[v6]` in brackets, or a
    name, resolved once here with the system's resolver), `#` comments and blank lines; converted to
    {(address, port): node id}. A line kwsniff cannot use fails the option, naming the line."""

    name = "file"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> dict[tuple[str, int], int]:
        return checked(broker_map, value, param, ctx)


BROKER_MAP = BrokerMapFile()


class Checked(click.ParamType):
    """A value through one check of kwsniff.core.values, named ``name`` in --help."""

    def __init__(self, check: Callable[[Any], Any], name: str) -> None:
        self.check = check
        self.name = name

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        return checked(self.check, value, param, ctx)
