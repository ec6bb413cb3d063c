"""The `kwsniff` command line: the click group and its sub-commands (the process entry: kwsniff.entry)."""

from __future__ import annotations

import click

from kwsniff import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kwsniff")
def main() -> None:
    """kwsniff: a passive Apache Kafka protocol analyzer."""


def _register() -> None:
    # Each sub-command lives in its own module under kwsniff/commands/.
    from kwsniff.commands import read

    main.add_command(read.read)
    from kwsniff.commands import show

    main.add_command(show.show)
    from kwsniff.commands import spark

    main.add_command(spark.spark)
    from kwsniff.commands import report

    main.add_command(report.report)
    from kwsniff.commands import capture

    main.add_command(capture.capture)


_register()
