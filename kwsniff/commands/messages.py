"""What the commands say on stderr: one line per message, prefixed so scripts can tell them apart.

Errors and warnings always go to stderr, also with `--quiet` (which silences only the summary and
the progress bar), so `kwsniff ... | jq` and `-q` never hide them.
"""

from __future__ import annotations

from collections.abc import Iterable

import click


def error(message: str) -> None:
    click.echo(f"kwsniff: error: {message}", err=True)


def warnings(capture: str, messages: Iterable[str]) -> None:
    for message in messages:
        click.echo(f"kwsniff: warning: {capture}: {message}", err=True)
