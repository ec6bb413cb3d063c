"""The `kwsniff` command line: the click group and its sub-commands (the process entry: kwsniff.entry).

Each sub-command lives in its own module under kwsniff/commands/ and is imported only when it runs
(or its own `--help` is asked for): `kwsniff read` does not load `spark`'s or `report`'s modules, and
`kwsniff --help` loads none, listing each with the one line below (tests/test_cli_process.py checks
that the lines are the commands' own)."""

from __future__ import annotations

import importlib
import sys
from typing import IO, Any

import click

from kwsniff import __version__

# name -> (module, the command's one-line help as `kwsniff --help` shows it)
COMMANDS = {
    "capture": ("kwsniff.commands.capture", "Capture Kafka traffic on IFACE into Parquet tables under..."),
    "compact": ("kwsniff.commands.compact", "Compact the Delta tables under OUT (a path or..."),
    "convert": (
        "kwsniff.commands.convert",
        "Make the directory dataset OUT (written by `read`, `capture`...",
    ),
    "read": ("kwsniff.commands.read", "Decode CAPTURES (pcap, pcapng, optionally gzipped; `-` for..."),
    "retain": ("kwsniff.commands.retain", "Keep only recent rows in the Delta tables under OUT (a..."),
    "report": ("kwsniff.commands.report", "Fleet report over TABLES (the --out of `kwsniff read` or..."),
    "show": ("kwsniff.commands.show", "Print every request and response of CAPTURE with every decoded..."),
    "spark": ("kwsniff.commands.spark", "Decode INPUTS (files, directories, globs) on Spark into..."),
}


class OneLineError(click.ClickException):
    """A click error said the way kwsniff says every error: one `kwsniff: error:` line on stderr
    (with the hint to `--help` for a usage error), and click's exit status (2 for usage)."""

    def __init__(self, err: click.ClickException) -> None:
        super().__init__(err.format_message())
        self.exit_code = err.exit_code  # type: ignore[misc]  # click's ClassVar, per error here
        self.hint = ""
        if isinstance(err, click.UsageError):
            path = err.ctx.command_path if err.ctx is not None else "kwsniff"
            self.hint = f" (see '{path} --help')"

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(
            f"kwsniff: error: {self.message.rstrip('.') if self.hint else self.message}{self.hint}", err=True
        )


class _LazyGroup(click.Group):
    # Usage errors come up while the group's own arguments are read (make_context: an unknown
    # command) and while a sub-command's are (invoke); both become one line.
    def make_context(
        self, info_name: str | None, args: list[str], parent: click.Context | None = None, **extra: Any
    ) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except OneLineError:
            raise
        except click.ClickException as err:
            raise OneLineError(err) from None

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        command = getattr(importlib.import_module(COMMANDS[cmd_name][0]), cmd_name)
        assert isinstance(command, click.Command)
        return command

    def invoke(self, ctx: click.Context) -> object:
        """The command, and the one rule for signals (kwsniff/commands/signals.py): a command that
        Ctrl-C or SIGTERM stopped before it finished exits 130 or 143 (click's own would be 1); a usage
        error in a sub-command's arguments is one line (OneLineError)."""
        from kwsniff.commands.signals import Interrupted, exit_status

        try:
            return super().invoke(ctx)
        except OneLineError:
            raise
        except click.ClickException as err:
            raise OneLineError(err) from None
        except (KeyboardInterrupt, Interrupted) as stopped:
            sys.exit(exit_status(stopped))

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, COMMANDS[name][1]) for name in self.list_commands(ctx)])


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kwsniff")
def main() -> None:
    """kwsniff: a passive Apache Kafka protocol analyzer."""
