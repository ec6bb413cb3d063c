"""`kwsniff convert`: a directory dataset of an earlier kwsniff made Delta tables, in one step."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import click

from kwsniff.commands import messages
from kwsniff.commands.fields import options_of
from kwsniff.core.options import ReadOptions


@click.command()
@click.argument("out", type=click.Path(path_type=Path))
@options_of(ReadOptions, "host")
def convert(out: Path, host: str | None) -> None:
    """Make the directory dataset OUT (written by `read`, `capture` or `spark` with a plain --out)
    Delta tables in place, in one step: the same files, committed in one Delta log entry per table,
    every row's host --host (docs/delta.md)."""
    from kwsniff.sinks import OutputError
    from kwsniff.sinks.convert import convert as convert_dataset

    try:
        done = convert_dataset(out, host or socket.gethostname())
    except OutputError as exc:
        messages.error(str(exc))
        sys.exit(1)
    tables = ", ".join(f"{t} ({done.files[t]:,} files, {done.rows[t]:,} rows)" for t in done.files)
    click.echo(f"{out}: Delta tables now: {tables}")
