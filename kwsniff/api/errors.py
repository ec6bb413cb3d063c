"""The Python API's exceptions: one family, mirroring why the commands exit non-zero
(kwsniff.core.exits, docs/datasets.md). Imports nothing heavy: `except kwsniff.KwsniffError`
costs no pyarrow."""

from __future__ import annotations

from kwsniff.core.exits import EXIT_STRICT


class KwsniffError(Exception):
    """Anything kwsniff refuses or cannot do; ``exit_code`` is the status the command would exit with."""

    exit_code = 1


class UsageError(KwsniffError, ValueError):
    """An option the command would refuse: an unknown name, a value of the wrong kind or out of its
    range (exit status 2). A ValueError too, so ``except ValueError`` catches a bad argument as it
    would elsewhere in Python."""

    exit_code = 2


class InputError(KwsniffError):
    """An input that is missing or is not a capture, or a key log that cannot be read."""


class OutputError(KwsniffError):
    """A dataset that cannot be written: `--out` holds one and ``overwrite`` was not given, a full disk."""


class ReportError(KwsniffError):
    """A report that cannot run: not a directory of kwsniff tables, DuckDB past its memory or spill limit."""


class StrictError(KwsniffError):
    """``strict=True`` and something was not decoded: ``reasons`` lists what, per capture, as
    `read --strict` prints them; ``tables`` holds what was decoded (exit status 3)."""

    exit_code = EXIT_STRICT

    def __init__(self, reasons: list[str], tables: object = None) -> None:
        super().__init__("; ".join(reasons))
        self.reasons = reasons
        self.tables = tables
