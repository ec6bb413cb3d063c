"""kwsniff as a library (docs/python-api.md): decode captures into Arrow tables in this process,
stream their batches, and run the report's sections, with the same core as the commands
(kwsniff.core): the same options, decoder, outputs and answers.

Re-exported by the package root (``kwsniff.read``...), which imports this module only when one of
these names is first used: ``import kwsniff`` stays light. Nothing here imports pyarrow until a
function is called.
"""

from kwsniff.api.errors import (
    InputError,
    KwsniffError,
    OutputError,
    ReportError,
    StrictError,
    UsageError,
)
from kwsniff.api.reading import Batch, iter_read, read
from kwsniff.api.reporting import report
from kwsniff.api.tables import Tables

__all__ = [
    "Batch",
    "InputError",
    "KwsniffError",
    "OutputError",
    "ReportError",
    "StrictError",
    "Tables",
    "UsageError",
    "iter_read",
    "read",
    "report",
]
