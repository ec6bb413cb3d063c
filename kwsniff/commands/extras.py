"""Sub-commands that need an optional extra (`pip install 'kwsniff[spark]'`) check for it first.

Without the extra, the user gets one `kwsniff: error:` line naming what to install and exit status 2
(a usage error: the command cannot run as installed), never a traceback from a lazy import deep in
the pipeline. The check looks modules up without importing them, so `--help` stays light and works
without the extra.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import Any

import click

from kwsniff.commands import messages

MISSING_EXTRA_EXIT = 2


def absent(modules: Sequence[str]) -> list[str]:
    """The modules of `modules` that cannot be imported here (looked up, not imported)."""
    return [m for m in modules if importlib.util.find_spec(m) is None]


def require(what: str, extra: str, modules: Sequence[str]) -> None:
    """Exit with one line if `what` (e.g. "kwsniff spark") lacks a module of `extra`."""
    missing = absent(modules)
    if missing:
        messages.error(
            f"{what} needs the {extra} extra: pip install 'kwsniff[{extra}]' (missing: {', '.join(missing)})"
        )
        raise click.exceptions.Exit(MISSING_EXTRA_EXIT)


class NeedsExtra(click.Command):
    """A click command that checks its extra before parsing its arguments.

    Before parsing, so that `kwsniff spark x.pcap` names the extra even while an option is missing;
    `--help` is let through so the command can be read about before installing anything.
    """

    def __init__(self, *args: Any, extra: str, modules: Sequence[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.extra = extra
        self.modules = tuple(modules)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not set(args) & set(ctx.help_option_names):
            require(f"kwsniff {self.name}", self.extra, self.modules)
        return super().parse_args(ctx, args)
