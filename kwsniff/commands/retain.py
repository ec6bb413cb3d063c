"""`kwsniff retain OUT --older-than 7d`: the days of the Delta tables under OUT older than asked
removed from the tables, and the files out of the tables for longer than their grace deleted
(kwsniff.sinks.delta_upkeep; docs/delta.md)."""

from __future__ import annotations

from functools import partial

import click

from kwsniff.commands.compact import dataset_location, on_storage, storage_option, table_option
from kwsniff.commands.values import Duration


@click.command()
@click.argument("out")
@click.option(
    "--older-than",
    "older_than_s",
    type=Duration(),
    required=True,
    help="Remove the days whose rows are all older than this (7d, 12h, 30m, 90s).",
)
@table_option
@storage_option
def retain(out: str, older_than_s: float, tables: tuple[str, ...], storage_options: tuple[str, ...]) -> None:
    """Keep only recent rows in the Delta tables under OUT (a path or s3://bucket/prefix): remove, in
    one commit per table, every UTC day whose rows are all older than --older-than; then delete the
    files out of the tables for longer than their grace (an hour), these days' files an hour later."""
    from kwsniff.sinks.delta_upkeep import retain_table

    location, chosen = dataset_location(out, storage_options, tables)
    for table in chosen:
        done = on_storage(table, partial(retain_table, location, table, older_than_s))
        click.echo(
            f"{table}: {done.files_removed} files ({done.rows_removed} rows) of the days before "
            f"{done.first_kept_day} removed; {done.files_deleted} files out of the table deleted"
        )
