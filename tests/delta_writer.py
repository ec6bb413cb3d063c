"""A writer process of tests/test_delta_tables.py: kwsniff Parquet files committed to a Delta table.

    python tests/delta_writer.py URI TABLE WRITER COMMITS FILES [--go PATH] [--stage-and-wait]

Each commit appends FILES files of ROWS_PER_FILE `requests` rows whose (capture, conn_id) name the
writer, the commit and the file, so a reader can tell every row apart. Storage options come from the
AWS_* environment. ``--go PATH``: print "ready" once the table is open, then wait (bounded) until PATH exists, so several
writers start at once.
``--stage-and-wait``: stage the files of one commit, print "staged" and the staged paths, and block on
stdin without committing (the test kills the process there).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from kwsniff.sinks.delta import DeltaTableWriter
from kwsniff.sinks.location import parse_location
from kwsniff.sinks.parquet import ParquetSink
from kwsniff.tables.schemas import SCHEMAS

ROWS_PER_FILE = 7
DATE = "2026-12-07"
GO_TIMEOUT_S = 60.0


def write_file(spool: Path, capture: str) -> Path:
    with ParquetSink(spool, capture, tables=("requests",)) as sink:
        for conn_id in range(ROWS_PER_FILE):
            sink.add("requests", {"capture": capture, "conn_id": conn_id, "api_key": 0})
    return sink.paths["requests"]


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("uri", "table", "writer"):
        parser.add_argument(name)
    parser.add_argument("commits", type=int)
    parser.add_argument("files", type=int)
    parser.add_argument("--go")
    parser.add_argument("--stage-and-wait", action="store_true")
    args = parser.parse_args()
    writer = DeltaTableWriter(parse_location(args.uri), args.table, SCHEMAS[args.table])
    if args.go:
        print("ready", flush=True)
        deadline = time.monotonic() + GO_TIMEOUT_S
        while not Path(args.go).exists():
            if time.monotonic() > deadline:
                sys.exit("no go")
            time.sleep(0.01)
    with tempfile.TemporaryDirectory() as spool:
        for commit in range(args.commits):
            paths = [write_file(Path(spool), f"{args.writer}-{commit}-{f}") for f in range(args.files)]
            staged = [writer.stage(path, date=DATE, host=args.writer) for path in paths]
            if args.stage_and_wait:
                print("staged", *(s.action.path for s in staged), flush=True)
                sys.stdin.read()
                sys.exit("stdin closed before the kill")
            writer.commit(staged)
            print("committed", commit, flush=True)


if __name__ == "__main__":
    main()
