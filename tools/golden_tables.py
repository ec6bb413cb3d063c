"""Digests of every table `kwsniff read` writes for the repository's captures: the golden reference.

    python tools/golden_tables.py            # rewrite tests/data/golden/tables.json
    python tools/golden_tables.py --check    # compare, print what differs, exit 1 if anything does

tests/test_golden_tables.py recomputes these digests and compares them, so a change that was meant
to be pure speed cannot change a table's content. Each table is read back from the Parquet files
(so Arrow types count), its rows canonicalised (one JSON line per row, keys sorted, bytes as hex,
lines sorted) and hashed over the columns recorded in the reference only: a new column does not
disturb the comparison, a changed value in a known column does. When a change of table content is
intended (a new status, another Kafka detection rule...), rerun this command and commit the new
tables.json with the change, saying why in the commit.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kwsniff.pipeline.run import result_row, run_capture  # noqa: E402
from kwsniff.pipeline.session import SessionOptions  # noqa: E402
from kwsniff.sinks import ParquetSink  # noqa: E402
from kwsniff.tables import DEFAULT_TABLES  # noqa: E402

GOLDEN = ROOT / "tests" / "data" / "golden" / "tables.json"
VARYING = {"captures": ("path", "started", "duration_ms")}
# (name, options): the default read, and one with the records table and its payloads.
CONFIGS: dict[str, SessionOptions] = {
    "plain": SessionOptions(),
    "record_payloads": SessionOptions(records=True, record_payloads=True),
}


def captures() -> list[Path]:
    """Every capture in the repository: real traffic, the sample, and the hostile ones."""
    data = ROOT / "tests" / "data"
    found = sorted((data / "captures").glob("*.pcap")) + [ROOT / "sample_pcaps" / "quickstart.pcap"]
    found += sorted(p for p in (data / "hostile").iterdir() if p.suffix in (".pcap", ".pcapng"))
    return found


def _canonical(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, float):
        return repr(value)  # exact, and distinguishes 1.0 from 1
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    return value


def table_digest(rows: list[dict[str, Any]], columns: list[str]) -> str:
    lines = sorted(
        json.dumps({c: _canonical(row.get(c)) for c in columns}, sort_keys=True, default=str) for row in rows
    )
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def read_tables(path: Path, options: SessionOptions) -> dict[str, tuple[list[str], list[dict[str, Any]]]]:
    """Table name -> (columns, rows) as written to Parquet by `kwsniff read` with ``options``."""
    names = (*DEFAULT_TABLES, "records") if options.records else DEFAULT_TABLES
    with tempfile.TemporaryDirectory() as out:
        sink = ParquetSink(out, path.name, names)
        sink.add("captures", result_row(run_capture(path, sink, options)))
        sink.close()
        tables = {}
        for name in names:
            where = Path(out) / name
            if not where.exists():
                tables[name] = ([], [])
                continue
            table = ds.dataset(where).to_table()
            # Where the file lies and when it was read change from run to run; the rest is content.
            columns = [c for c in table.column_names if c not in VARYING.get(name, ())]
            tables[name] = (columns, table.to_pylist())
    return tables


def digests(columns: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """{"columns": {table: [...]}, "tables": {capture: {config: {table: [rows, sha256]}}}}; given the
    reference's columns, each table is hashed over those only (so new columns are left out)."""
    known: dict[str, list[str]] = dict(columns or {})
    result: dict[str, Any] = {}
    for path in captures():
        for config, options in CONFIGS.items():
            for name, (names, rows) in read_tables(path, options).items():
                if names and name not in known:
                    known[name] = names
                digest = [len(rows), table_digest(rows, known.get(name, names))]
                result.setdefault(path.name, {}).setdefault(config, {})[name] = digest
    return {"columns": known, "tables": result}


def differences(expected: dict[str, Any], got: dict[str, Any]) -> list[str]:
    out = []
    want_all, have_all = expected["tables"], got["tables"]
    for capture in sorted(set(want_all) | set(have_all)):
        for config in CONFIGS:
            want = want_all.get(capture, {}).get(config, {})
            have = have_all.get(capture, {}).get(config, {})
            for table in sorted(set(want) | set(have)):
                w, h = want.get(table), have.get(table)
                if w != h:
                    wrows = w[0] if w else None
                    hrows = h[0] if h else None
                    out.append(f"{capture} [{config}] {table}: rows {wrows} -> {hrows}, content differs")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="compare with tables.json instead of writing it")
    args = parser.parse_args()
    if args.check:
        expected = json.loads(GOLDEN.read_text())
        found = differences(expected, digests(expected["columns"]))
        print("\n".join(found) or "tables equal the golden reference")
        return 1 if found else 0
    GOLDEN.write_text(
        json.dumps(digests(), sort_keys=True, separators=(",", ":")).replace('},"', '},\n"') + "\n"
    )
    print(f"wrote {GOLDEN}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
