"""Requests recovered per snap length: what `tcpdump -s N` leaves kwsniff of each test capture.

    python tools/snap_length_table.py                        # values per snap length, 60..600 bytes
    python tools/snap_length_table.py --every-4              # the same, every 4 bytes from 60 to 600
    python tools/snap_length_table.py --per-capture          # per capture, 64..512 bytes
    python tools/snap_length_table.py --every-4 --capture other.pcap:9092   # another capture's values
    python tools/snap_length_table.py --make-java-capture tests/data/snaplen/java_client.pcap

The first table sums over the captures, per snap length: the `requests` and `partitions` rows of the
cut captures compared with the full capture's rows of the same request (connection endpoints,
correlation id, API; topic and partition), the non-null values compared, the wrong ones (a value
the full capture does not have, or a row it does not have: must be 0), the values the cut left null,
and the recovered / recoverable requests (as below). tests/test_snap_length_values.py asserts the
same every 4 bytes.

For each capture and snap length N the capture is cut with `editcap -F pcap -s N`. "recoverable" are
the requests whose request header (size, api key, version, correlation id) and response header (size,
correlation id) lie inside the kept bytes, found by a dpkt reader of the FULL capture
(tests/snaplen_oracle.py); "recovered" are those kwsniff's reading of the cut file pairs and times
exactly as that reader does (api key, version, client id where kept, request and response times,
latency). "partitions" and "record counts" are the requests rows whose partitions rows name a topic,
and whose record_count is known, out of the requests that have them in the full capture.
--make-java-capture runs tansu and the Kafka Java client (tests/java/SnapWorkload.java) under tcpdump.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

import snaplen_oracle  # noqa: E402

from kwsniff.pipeline.run import run_capture  # noqa: E402
from kwsniff.pipeline.session import SessionOptions  # noqa: E402
from kwsniff.rows import ListSink  # noqa: E402

SNAP_LENGTHS = (64, 96, 128, 160, 256, 512)
VALUE_SNAP_LENGTHS = (60, 64, 68, 72, 76, 80, 84, 88, 92, 96, 100, 128, 160, 192, 256, 320, 384, 512, 600)


def captures() -> list[Path]:
    return [
        *sorted((REPO / "tests/data/captures").glob("*.pcap")),
        *sorted((REPO / "sample_pcaps").glob("*.pcap")),
        *sorted((REPO / "tests/data/snaplen").glob("*.pcap")),
    ]


# Captures named on the command line (--capture PCAP:PORT), in place of the repository's.
CHOSEN: dict[Path, int] = {}


def broker_port(pcap: Path) -> int:
    if pcap in CHOSEN:
        return CHOSEN[pcap]
    for sidecar in (Path(f"{pcap}.tshark.json"), Path(f"{pcap}.json")):
        if sidecar.exists():
            return int(json.loads(sidecar.read_text())["broker_port"])
    raise SystemExit(f"no broker port for {pcap}")


def tables(pcap: Path) -> dict:
    sink = ListSink()
    run_capture(pcap, sink, SessionOptions())
    return sink.tables


def us(ts: object) -> int:
    return ts if isinstance(ts, int) else round(ts.timestamp() * 1_000_000)  # type: ignore[attr-defined]


def recovered(ex: snaplen_oracle.Exchange, row: dict | None) -> bool:
    if row is None:
        return False
    client_id = ex.client_id if ex.request.kept_prefix() >= ex.client_id_end() else None
    got = (row["api_key"], row["api_version"], row["client_id"], us(row["ts_request"]), row["latency_ms"])
    return got == (ex.api_key, ex.api_version, client_id, ex.request.ts_last, ex.latency_ms)


def with_facts(t: dict) -> tuple[set, set]:
    """(conn, correlation id) of requests with a named partitions row, and with a known record count."""
    named = {(p["conn_id"], p["correlation_id"]) for p in t["partitions"] if p["topic"] is not None}
    counted = {(r["conn_id"], r["correlation_id"]) for r in t["requests"] if r["record_count"] is not None}
    return named, counted


def table() -> None:
    print(
        "| capture | snap length | requests | recoverable | recovered | with partitions | with record counts |"
    )
    print("|---|---|---|---|---|---|---|")
    tmp = Path(tempfile.mkdtemp(prefix="snaplen-"))
    try:
        for full in captures():
            port = broker_port(full)
            named_full, counted_full = with_facts(tables(full))
            for n in SNAP_LENGTHS:
                cut = tmp / f"{full.stem}.s{n}.pcap"
                subprocess.run(["editcap", "-F", "pcap", "-s", str(n), str(full), str(cut)], check=True)
                t = tables(cut)
                ports = {c["conn_id"]: c["client_port"] for c in t["connections"]}
                rows = {(ports[r["conn_id"]], r["correlation_id"]): r for r in t["requests"]}
                exs = snaplen_oracle.exchanges(full, port, n)
                want = [e for e in exs if snaplen_oracle.header_kept(e)]
                ok = sum(recovered(e, rows.get((e.conn[1], e.correlation_id))) for e in want)
                named, counted = with_facts(t)
                print(
                    f"| {full.name} | {n} | {len(exs)} | {len(want)} | {ok} | {len(named)}/{len(named_full)}"
                    f" | {len(counted)}/{len(counted_full)} |"
                )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def values_table(snap_lengths: Sequence[int]) -> None:
    from test_snap_length_values import NOT_VALUES, exchange_key, keyed_tables, wrong_values

    print(
        "| snap length | requests rows | partitions rows | values compared | wrong values | null values"
        " | recovered / recoverable |"
    )
    print("|---|---|---|---|---|---|---|")
    tmp = Path(tempfile.mkdtemp(prefix="snaplen-"))
    try:
        fulls = {full: keyed_tables(tables(full)) for full in (list(CHOSEN) or captures())}
        for n in snap_lengths:
            counts = dict.fromkeys(("requests", "partitions", "values", "wrong", "nulls", "ok", "want"), 0)
            for full, whole in fulls.items():
                cut = tmp / f"{full.stem}.s{n}.pcap"
                subprocess.run(["editcap", "-F", "pcap", "-s", str(n), str(full), str(cut)], check=True)
                got = keyed_tables(tables(cut))
                for table in ("requests", "partitions"):
                    for key, rows in got[table].items():
                        for row in rows:
                            counts[table] += 1
                            counts["values"] += sum(
                                v is not None for c, v in row.items() if c not in NOT_VALUES
                            )
                            if key not in whole[table] or len(rows) > 1:
                                counts["wrong"] += sum(
                                    v is not None for c, v in row.items() if c not in NOT_VALUES
                                )
                                continue
                            (full_row,) = whole[table][key]
                            counts["wrong"] += len(wrong_values(row, full_row))
                            counts["nulls"] += sum(
                                row.get(c) is None and v is not None
                                for c, v in full_row.items()
                                if c not in NOT_VALUES
                            )
                for ex in snaplen_oracle.exchanges(full, broker_port(full), n):
                    if snaplen_oracle.header_kept(ex):
                        counts["want"] += 1
                        (row,) = got["requests"].get(exchange_key(ex), [None])
                        counts["ok"] += recovered(ex, row)
            print(
                f"| {n} | {counts['requests']:,} | {counts['partitions']:,} | {counts['values']:,}"
                f" | {counts['wrong']} | {counts['nulls']:,} | {counts['ok']:,} / {counts['want']:,} |"
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def make_java_capture(out: Path) -> None:
    from snap_traffic import java_snap_traffic

    with tempfile.TemporaryDirectory() as tmp:
        port, paths = java_snap_traffic(Path(tmp), records=24)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(paths[0], out)
    note = "tansu + kafka-clients 3.9.1 (tests/java/SnapWorkload.java, 24 records), tcpdump -s 0 on lo"
    Path(f"{out}.json").write_text(json.dumps({"broker_port": port, "made_by": note}, indent=1) + "\n")
    print(f"{out}: broker port {port}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--make-java-capture", type=Path, metavar="PCAP")
    parser.add_argument("--per-capture", action="store_true", help="requests recovered per capture")
    parser.add_argument("--every-4", action="store_true", help="every 4 bytes from 60 to 600")
    parser.add_argument(
        "--capture",
        action="append",
        default=[],
        metavar="PCAP:PORT",
        help="the values table of this capture (its broker port) instead of the repository's; repeatable",
    )
    args = parser.parse_args()
    for spec in args.capture:
        path, _, port = spec.rpartition(":")
        CHOSEN[Path(path).resolve()] = int(port)
    if args.make_java_capture:
        make_java_capture(args.make_java_capture)
    elif args.per_capture:
        table()
    else:
        values_table(range(60, 601, 4) if args.every_4 else VALUE_SNAP_LENGTHS)


if __name__ == "__main__":
    main()
