"""`kwsniff` as a process of its own (the console script, `python -m kwsniff`): the command line,
with the imports it never needs refused before anything heavy is imported."""

from __future__ import annotations

import sys

# Optional dependencies of pyarrow that the command line never uses: pyarrow imports numpy when it
# is imported (0.08 s) and pandas on its first Python-to-Arrow conversion (0.2 s), together a fifth
# of reading a 300 MB capture. Without them pyarrow converts plain Python values all the same.
REFUSED = frozenset({"numpy", "pandas"})
# Sub-commands that drive PySpark, whose Arrow exchange needs pandas and numpy.
NEEDS_PANDAS = frozenset({"spark", "report"})


class _RefuseImports:
    """Import hook that makes importing the given top-level packages fail in this process."""

    def __init__(self, names: frozenset[str]) -> None:
        self.names = names

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name.partition(".")[0] in self.names:
            raise ImportError(f"{name} is not used by the kwsniff command line")
        return None


def refuse_unused_imports() -> None:
    """Refuse REFUSED packages not imported yet (library users and tests, which call
    kwsniff.cli.main directly, keep them)."""
    names = frozenset(n for n in REFUSED if n not in sys.modules)
    if names:
        sys.meta_path.insert(0, _RefuseImports(names))


def run() -> None:
    """The console script: `kwsniff ...`."""
    if not NEEDS_PANDAS.intersection(sys.argv[1:2]):
        refuse_unused_imports()
    from kwsniff.cli import main

    main()
