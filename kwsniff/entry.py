"""`kwsniff` as a process of its own (the console script, `python -m kwsniff`).

Nothing heavy is imported here or by `kwsniff --help`: each sub-command imports what it needs (pyarrow,
numpy, pandas, pyspark) when it runs, so `--help` and usage errors stay fast."""

from __future__ import annotations


def run() -> None:
    """The console script: `kwsniff ...`."""
    from kwsniff.cli import main

    main()
