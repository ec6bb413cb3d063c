"""The API's keyword arguments as the options of a command: each keyword is the option's long name in
snake_case (`--max-frame-size` is ``max_frame_size``), checked and converted by the option's own
type and defaulting to the option's own default, so the API and the command cannot drift apart."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import click

from kwsniff.api.errors import UsageError


def keyword(param: click.Option) -> str:
    """The keyword of an option: its long name in snake_case."""
    return max(param.opts, key=len).lstrip("-").replace("-", "_")


def command_values(command: click.Command, given: dict[str, Any], own: Iterable[str] = ()) -> dict[str, Any]:
    """{parameter name: value} of every option of ``command`` but those named in ``own`` (options
    the API offers in its own way), from ``given`` (keyword: value) or the option's default.
    A keyword that is no option, or a value the option refuses, raises UsageError."""
    ctx = click.Context(command)
    options = {
        keyword(p): p for p in command.params if isinstance(p, click.Option) and p.name not in set(own)
    }
    unknown = sorted(set(given) - set(options))
    if unknown:
        raise UsageError(
            f"{command.name}: no option {', '.join(unknown)} (options: {', '.join(sorted(options))})"
        )
    values = {}
    for name, param in options.items():
        if param.is_flag and not param.multiple:
            asked = given.get(name, False)
            if not isinstance(asked, bool):  # `records="no"` is truthy: a flag takes True or False only
                raise UsageError(f"{command.name}: {name}={asked!r}: a flag, True or False")
            on = param.flag_value if isinstance(param.flag_value, bool) else True
            values[param.name] = on if asked else not on
            continue
        values[param.name] = option_value(command, param, given.get(name, UNSET), ctx)
    return values


UNSET = object()


def option_value(
    command: click.Command, param: click.Parameter, value: Any, ctx: click.Context | None = None
) -> Any:
    """``value`` (UNSET: the option's default) checked and converted by ``param``'s own type, as the
    command line converts it; a value it refuses, or a None the option has no use for, raises UsageError."""
    ctx = ctx or click.Context(command)
    name = keyword(param) if isinstance(param, click.Option) else param.name
    if value is UNSET:
        value = param.get_default(ctx)
        if param.multiple:
            value = tuple(value) if isinstance(value, list | tuple) else ()  # UNSET: no default
    elif param.multiple:
        if isinstance(value, str | bytes | int | float) or hasattr(value, "__fspath__"):
            value = (value,)
        else:
            try:
                value = tuple(value)
            except TypeError:
                raise UsageError(f"{command.name}: {name}={value!r}: not a value or a list of them") from None
        # click lets None through its types (an option not given): in a list it is no value at all.
        if any(v is None for v in value):
            raise UsageError(f"{command.name}: {name}={list(value)!r}: None is not a value")
    elif value is None and param.get_default(ctx) is not None:
        raise UsageError(
            f"{command.name}: {name}=None: the option takes a value (default {param.get_default(ctx)!r})"
        )
    try:
        return param.type_cast_value(ctx, value)
    except click.BadParameter as exc:
        raise UsageError(f"{command.name}: {name}={value!r}: {exc.format_message()}") from None


def option_of(command: click.Command, name: str) -> click.Parameter:
    """The parameter of ``command`` named ``name``."""
    return next(p for p in command.params if p.name == name)
