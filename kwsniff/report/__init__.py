"""The report side: the report's sections (SQL over the Parquet tables, on DuckDB or Spark) and their plots.

``kwsniff.report`` is also the Python API's report function (kwsniff.api.reporting.report,
docs/python-api.md). Importing this package makes the package root's attribute ``report`` this
module (Python's import system sets it), so the module is callable and hands the call on.
"""

import sys
import types
from typing import Any


class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from kwsniff.api.reporting import report

        return report(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
