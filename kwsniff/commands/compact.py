"""`kwsniff compact OUT`: each finished hour's small files of the Delta tables under OUT into one file
per table and host, then the files out of the tables for longer than their grace deleted
(kwsniff.sinks.delta_upkeep; docs/delta.md). Also the door `kwsniff retain` goes through to OUT."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from kwsniff.sinks.location import Location

T = TypeVar("T")


def storage_option_pairs(values: Sequence[str]) -> dict[str, str]:
    """``--storage-option KEY=VALUE`` values as a mapping; a value without ``=`` is a usage error."""
    options = {}
    for value in values:
        key, equals, setting = value.partition("=")
        if not equals or not key:
            raise click.BadParameter(f"{value!r} is not KEY=VALUE", param_hint="'--storage-option'")
        options[key] = setting
    return options


def storage_option(command: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--storage-option",
        "storage_options",
        multiple=True,
        metavar="KEY=VALUE",
        help="An S3 option over the AWS_* variables (AWS_ENDPOINT_URL=..., AWS_REGION=...; repeatable).",
    )(command)


def table_option(command: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--table",
        "tables",
        multiple=True,
        metavar="NAME",
        help="Only this table (repeatable); default: every Delta table under OUT.",
    )(command)


def on_storage(what: str, step: Callable[[], T]) -> T:
    """``step``; a failure of the storage or of the table (refused credentials, no server, no table)
    as one `kwsniff: error:` line naming ``what``."""
    from deltalake.exceptions import DeltaError

    from kwsniff.sinks.delta import DeltaTableError

    try:
        return step()
    except (DeltaError, DeltaTableError, OSError) as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise click.ClickException(f"{what}: {first}") from None


def dataset_location(
    out: str, storage_options: Sequence[str], tables: Sequence[str]
) -> tuple[Location, list[str]]:
    """OUT as a location and the tables to work on: the ones named, or every Delta table under OUT
    (none there is an error: OUT is no kwsniff Delta dataset)."""
    from kwsniff.sinks.delta import dataset_tables
    from kwsniff.sinks.location import LocationError, parse_location

    try:
        location = parse_location(out, storage_option_pairs(storage_options))
    except LocationError as err:
        raise click.ClickException(str(err)) from None
    found = on_storage(out, lambda: dataset_tables(location))
    if tables:
        missing = sorted(set(tables) - set(found))
        if missing:
            raise click.ClickException(f"{out}: no Delta table {', '.join(missing)} there")
        return location, list(dict.fromkeys(tables))
    if not found:
        raise click.ClickException(f"{out}: no Delta tables there (a kwsniff --out written as Delta tables)")
    return location, found


@click.command()
@click.argument("out")
@table_option
@storage_option
def compact(out: str, tables: tuple[str, ...], storage_options: tuple[str, ...]) -> None:
    """Compact the Delta tables under OUT (a path or s3://bucket/prefix): each finished hour's files
    into one file per table and host, in one commit per table; then delete the files out of the tables
    for longer than their grace (an hour). Readers follow the log, so no row is ever read twice."""
    from kwsniff.sinks.delta_upkeep import compact_table, vacuum_table

    location, chosen = dataset_location(out, storage_options, tables)
    for table in chosen:
        done = on_storage(table, partial(compact_table, location, table))
        deleted = on_storage(table, partial(vacuum_table, location, table))
        click.echo(
            f"{table}: {done.files_removed} files of {done.hours} hours into {done.files_added} "
            f"({done.rows} rows); {len(deleted)} replaced files deleted"
        )
