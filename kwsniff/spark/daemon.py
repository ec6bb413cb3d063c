"""Spark's Python daemon for `kwsniff spark` in local mode, with the workers' code already imported.

PySpark's daemon (``pyspark.daemon``) forks one Python worker per executor core, and each worker
then imports ``pyspark.worker`` and kwsniff's decoding modules by itself: on a two-core machine that
is the same second or more of imports paid twice. This daemon imports them once, before it forks,
so every worker starts with them. Only modules that start no thread are imported here (a fork copies
only the forking thread): not pyarrow, whose import starts threads (jemalloc's among them); the
workers import it themselves. An import that fails is left to the worker, whose check
(:func:`kwsniff.spark.executors.kwsniff_check`) then says what is wrong in one line.

Used only in local mode, where the executors run this very installation (``spark.python.daemon.module``,
see :func:`kwsniff.spark.pipeline.decode_conf`); clusters keep PySpark's own daemon.
"""

from __future__ import annotations

import importlib

# Thread-free modules the workers import for every kwsniff task, heaviest first.
PRELOADED = (
    "pyspark.worker",
    "pyspark.cloudpickle",
    "kwsniff.pipeline.run",
    "kwsniff.pipeline.session",
    "kwsniff.capture.split",
    "kwsniff.net",
    "kwsniff.spark.executors",
)


def preload() -> None:
    for name in PRELOADED:
        try:
            importlib.import_module(name)
        except Exception:  # the worker imports it again and reports the failure itself
            continue


if __name__ == "__main__":
    preload()
    from pyspark.daemon import manager

    manager()
