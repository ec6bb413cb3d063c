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
            on = param.flag_value if isinstance(param.flag_value, bool) else True
            values[param.name] = on if given.get(name, False) else not on
            continue
        value = given[name] if name in given else param.get_default(ctx)
        if param.multiple:
            if name not in given:
                value = tuple(value) if isinstance(value, list | tuple) else ()  # UNSET: no default
            elif isinstance(value, str | bytes | int | float) or hasattr(value, "__fspath__"):
                value = (value,)
            else:
                value = tuple(value)  # type: ignore[arg-type]
        try:
            values[param.name] = param.type_cast_value(ctx, value)
        except click.BadParameter as exc:
            raise UsageError(f"{command.name}: {name}={value!r}: {exc.format_message()}") from None
    return values
