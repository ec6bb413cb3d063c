"""What Spark's executors run: which Python, and a check that it imported the driver's kwsniff.

Spark starts each executor's Python as ``python -m pyspark.daemon``, and ``-m`` puts the working
directory first on ``sys.path``: run from the folder above a clone, the clone (no ``__init__.py``)
becomes a namespace package named ``kwsniff`` and ``kwsniff.tables`` resolves to the `tables/`
output folder. A regular package installed in the executor's interpreter wins over a namespace
folder, but an editable install's finder (``pip install -e``) comes after ``sys.path``, so there the
folder wins. In local mode the workers run in the driver's working directory, wherever the user
started `kwsniff`: they get ``PYTHONSAFEPATH=1`` (:data:`SAFE_PATH`), which keeps the working
directory off ``sys.path``, and import the installed kwsniff as the driver does. Cluster executors
run in a working directory of Spark's own. Before a task unpickles anything of kwsniff it checks
which ``kwsniff`` it got, so a shadowed import fails with one line naming the path instead of
``cannot import name 'SCHEMAS' from 'kwsniff.tables'``.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import kwsniff

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PYTHON_CONF = "spark.pyspark.python"
DRIVER_PYTHON_CONF = "spark.pyspark.driver.python"
# Where `spark.archives` (``archive#environment``) unpacks the shipped venv, in each executor's
# working directory (YARN containers, standalone and Kubernetes executors alike).
SHIPPED_PYTHON = "./environment/bin/python"
# Local workers' environment: `python -m` then leaves the working directory off sys.path (Python
# 3.11+, which kwsniff needs), so a `kwsniff/` folder there cannot shadow the installed package.
SAFE_PATH = {"spark.executorEnv.PYTHONSAFEPATH": "1"}


def executor_python(conf: Mapping[str, str], environ: Mapping[str, str], shipped: bool) -> dict[str, str]:
    """The settings that choose the executors' Python: the shipped venv's with ``--ship-env``, else the
    user's own ``spark.pyspark.python`` or ``PYSPARK_PYTHON``, else the driver's own interpreter.

    PySpark takes the workers' interpreter from ``PYSPARK_PYTHON`` when the context starts (only
    spark-submit turns ``spark.pyspark.python`` into it), so the chosen one goes in both."""
    if shipped:
        python = SHIPPED_PYTHON
    else:
        python = conf.get(PYTHON_CONF) or environ.get("PYSPARK_PYTHON") or sys.executable
    return {PYTHON_CONF: python, DRIVER_PYTHON_CONF: conf.get(DRIVER_PYTHON_CONF, sys.executable)}


def driver_kwsniff() -> tuple[str, str]:
    """(version, package folder) of the kwsniff this driver runs."""
    return kwsniff.__version__, os.path.dirname(os.path.abspath(kwsniff.__file__))


def kwsniff_check(version: str, where: str) -> Callable[[], str | None]:
    """A function for executors: None when ``import kwsniff`` gives a regular package of ``version``,
    else the one-line reason. It is a closure so that cloudpickle ships it by value: unpickling it
    imports nothing of kwsniff, which is what it is there to check."""

    def check() -> str | None:
        import sys as _sys

        try:
            import kwsniff as imported
        except ImportError as exc:
            return (
                f"executor python {_sys.executable} has no kwsniff ({exc}); install kwsniff {version} there "
                "or use --ship-env"
            )
        file = getattr(imported, "__file__", None)
        if file is None:
            folders = list(getattr(imported, "__path__", []))
            return (
                f"executor imported kwsniff from {folders[0] if folders else '?'} (a namespace folder), "
                f"not the installed kwsniff {version}; run from another directory or use --ship-env"
            )
        found = getattr(imported, "__version__", "?")
        if found != version:
            return (
                f"executor imported kwsniff {found} from {file.rsplit('/', 2)[0]}, not the "
                f"driver's kwsniff {version} ({where}); install the same version on the workers or use --ship-env"
            )
        return None

    return check


def checked(work: Callable[[Iterator[Any]], Iterator[Any]]) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """``work`` (a ``mapInArrow`` function) run only after the executor passed ``kwsniff_check``.

    ``work`` travels pickled inside the closure and is unpickled after the check, because unpickling
    it imports kwsniff's modules (those are pickled by reference)."""
    from pyspark import cloudpickle

    check = kwsniff_check(*driver_kwsniff())
    blob = cloudpickle.dumps(work)

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        problem = check()
        if problem is not None:
            raise RuntimeError(problem)
        from pyspark import cloudpickle as _cloudpickle

        from kwsniff.sinks.parquet import arrow_without_pandas

        arrow_without_pandas()  # kwsniff's tasks hand Arrow plain Python values only

        yield from _cloudpickle.loads(blob)(batches)

    return run


def probe(spark: SparkSession) -> str | None:
    """Runs ``kwsniff_check`` once per executor core before the job; the first problem found, or None.

    A problem comes back as a row rather than a failed task, so Spark neither retries it nor logs
    a traceback; an interpreter that cannot start fails the probe, quietly, and ``failure`` names it."""
    check = kwsniff_check(*driver_kwsniff())

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        for batch in batches:
            problem = check() or ""
            if not problem:  # a worker's first task; pandas, which Arrow would import, is not needed
                from kwsniff.sinks.parquet import arrow_without_pandas

                arrow_without_pandas()
            yield pa.RecordBatch.from_pylist(
                [{"problem": problem}] * batch.num_rows, schema=pa.schema([("problem", pa.string())])
            )

    cores = max(1, spark.sparkContext.defaultParallelism)
    with _logs_off(spark):
        rows = spark.range(cores, numPartitions=cores).mapInArrow(run, "problem string").collect()
    return next((r["problem"] for r in rows if r["problem"]), None)


class _logs_off:
    """Spark's log lines off while probing (a failed probe is reported in one line of ours), then
    back to the level in force: the shell threshold PySpark's default profile sets (WARN), else the
    root logger's."""

    def __init__(self, spark: SparkSession) -> None:
        self.context = spark.sparkContext
        self.level = "WARN"

    def __enter__(self) -> None:
        jvm = self.context._jvm
        if jvm is not None:
            self.level = _log_level(jvm)
        self.context.setLogLevel("OFF")

    def __exit__(self, *exc: object) -> None:
        self.context.setLogLevel(self.level)


def _log_level(jvm: Any) -> str:
    try:
        logging = getattr(getattr(jvm.org.apache.spark.internal, "Logging$"), "MODULE$")
        shell = logging.sparkShellThresholdLevel()
    except Exception:  # py4j's errors for a Spark without that field: the root level then
        shell = None
    if shell is not None:
        return str(shell.toString())
    return str(jvm.org.apache.logging.log4j.LogManager.getRootLogger().getLevel().toString())


_CHECK_LINE = re.compile(r"(executor (?:imported kwsniff|python \S+ has no kwsniff) .*)$", re.MULTILINE)
_CANNOT_RUN = re.compile(r'Cannot run program "([^"]+)"[^\n]*?error=\d+, ([^\n]+)')


def failure(exc: BaseException) -> str | None:
    """The one line for a job that failed because of its executors' Python, or None for any other
    failure. ``exc`` is what PySpark raised: its text holds the executors' traceback."""
    text = str(exc)
    found = _CHECK_LINE.search(text)
    if found:
        return found.group(1).strip()
    found = _CANNOT_RUN.search(text)
    if found:
        python, why = found.group(1), found.group(2).strip()
        hint = "use --ship-env" if python != SHIPPED_PYTHON else "is spark.archives unpacked there?"
        return f"executors could not start python {python} ({why}): the workers lack this environment; {hint}"
    return None
