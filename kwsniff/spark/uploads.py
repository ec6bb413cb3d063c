"""`kwsniff spark --out s3://...`: each decode task puts its tables' files straight into the Delta
tables' storage, and the driver commits them (docs/spark.md, "Kubernetes").

A task writes its files on its executor's local disk as usual (:class:`kwsniff.spark.tasks.TaskSink`),
then uploads each table's file under the table's directory with a name of its own
(``date=<day>/host=<host>/<capture>-task-<uuid>.parquet``, :func:`kwsniff.sinks.delta.planned_file`)
and reports it in its status. No commit references the file yet, so no reader sees it; the driver
adds the files of the captures that did not fail to the run's commit (one log entry per table,
:meth:`kwsniff.sinks.delta_output.DeltaOutput.add_staged`). A file of a failed or retried task is in
no commit: ``vacuum`` removes it (`kwsniff compact`, a capture's upkeep).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kwsniff.sinks.location import Location


@dataclass(frozen=True)
class TableUploads:
    """Where tasks upload their files: the Delta tables at ``location``, partitioned by ``host``."""

    location: Location
    host: str


def upload_task_files(remote: TableUploads, files: Mapping[str, str], status: dict[str, Any]) -> None:
    """Each table's file of a task (``files``: by table, the local file; those of tables with rows
    in ``status["rows"]`` are taken) uploaded into its table; ``status["uploaded"]``: by table, the
    planned file (path, size, rows, date, host)."""
    import pyarrow.fs as pafs

    from kwsniff.sinks.delta import planned_file
    from kwsniff.sinks.delta_output import file_day
    from kwsniff.sinks.parquet import safe_file_stem

    fs, root = remote.location.filesystem()
    uploaded: dict[str, dict[str, Any]] = {}
    for table, rows in sorted(status["rows"].items()):
        if not rows:
            continue
        local = Path(files[table])
        named = local.with_name(f"{safe_file_stem(status['name'])}-task.parquet")
        os.replace(local, named)  # the capture's name in the table's file name
        planned = planned_file(named, date=file_day(named), host=remote.host)
        pafs.copy_files(
            str(named), f"{root}/{table}/{planned.path}", destination_filesystem=fs, chunk_size=8 << 20
        )
        uploaded[table] = asdict(planned)
    status["uploaded"] = uploaded
