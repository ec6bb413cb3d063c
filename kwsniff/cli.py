"""The `kwsniff` command line: the group, and the console-script entry point."""

from __future__ import annotations

import sys

import click

from kwsniff import __version__


class _NoPandas:
    """Import hook that makes `import pandas` fail in this process.

    pyarrow imports pandas on its first Python-to-Arrow conversion (0.2 s, a third of reading a
    300 MB capture). The command line never uses pandas, so `kwsniff` refuses it; library users and
    the tests (which call `main` directly) keep pandas."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "pandas" or name.startswith("pandas."):
            raise ImportError("pandas is not used by the kwsniff command line")
        return None


def run() -> None:
    """The console script: `kwsniff ...`."""
    if "pandas" not in sys.modules:
        sys.meta_path.insert(0, _NoPandas())
    main()


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


_register()
