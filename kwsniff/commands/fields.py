"""click options made from the fields of kwsniff.core.options: each option's name, default, help
and check come from its field, so the commands and the Python API take the same options and refuse
the same values with the same words."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from kwsniff.commands.sizes import BYTE_SIZE
from kwsniff.commands.values import BROKER_MAP, PORT, TUNNEL_PORT, BoundedInt, Checked, FiniteFloat
from kwsniff.core import values
from kwsniff.core.options import Spec, specs


def click_type(check: Callable[[Any], Any]) -> click.ParamType:
    """The click type of a check of kwsniff.core.values: one that calls it (and shows its range in --help)."""
    if isinstance(check, values.Number):
        return FiniteFloat(min=check.low, max=check.high, min_open=check.low_open)
    if isinstance(check, values.Whole):
        return BoundedInt(check.low, check.high)
    if isinstance(check, values.Choice):
        return click.Choice(check.words)
    named: dict[Callable[[Any], Any], click.ParamType] = {
        values.byte_size: BYTE_SIZE,
        values.port: PORT,
        values.tunnel_port: TUNNEL_PORT,
        values.broker_map: BROKER_MAP,
        values.path: click.Path(path_type=Path),
        values.out_location: Checked(values.out_location, "path|uri"),
        values.key_value: Checked(values.key_value, "key=value"),
        values.host_name: Checked(values.host_name, "name"),
        values.finding_threshold: Checked(values.finding_threshold, "name=value"),
    }
    return named[check]


def click_option(name: str, spec: Spec, default: Any, help_text: str | None = None) -> Callable[..., Any]:
    """The click option of the field ``name`` (``help_text``: a command's own words for it)."""
    flags = [spec.flag, *([spec.short] if spec.short else []), name]
    text = spec.help if help_text is None else help_text
    if spec.is_flag:
        return click.option(*flags, is_flag=True, default=default, help=text)
    return click.option(
        *flags,
        type=click_type(spec.check),
        multiple=spec.multiple,
        default=None if spec.multiple else default,
        show_default=spec.show_default,
        metavar=spec.metavar,
        help=text,
    )


def options_of(kind: type, *names: str, **help_texts: str) -> Callable[..., Any]:
    """A decorator adding the options of ``kind`` named in ``names`` (all its fields by default), in
    its fields' order, as the first options of the command."""

    def add(command: Callable[..., Any]) -> Callable[..., Any]:
        chosen = [(f, spec) for f, spec in specs(kind) if not names or f.name in names]
        for f, spec in reversed(chosen):
            command = click_option(f.name, spec, f.default, help_texts.get(f.name))(command)
        return command

    return add


def gathered(kind: type, argument: str, *names: str) -> Callable[..., Any]:
    """A decorator handing the options of ``kind`` (``names``, or all) to the command as one
    ``argument``: an instance of ``kind`` (the fields not named keep their defaults)."""

    def wrap(command: Callable[..., Any]) -> Callable[..., Any]:
        fields = [f.name for f, _ in specs(kind) if not names or f.name in names]

        @functools.wraps(command)
        def run(*args: Any, **kwargs: Any) -> Any:
            given = {n: kwargs.pop(n) for n in fields}
            return command(*args, **{argument: kind(**given)}, **kwargs)

        return options_of(kind, *names)(run)

    return wrap
