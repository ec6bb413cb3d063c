"""One exchange never stops a run (STYLE.md, issue 44): an exception raised while decoding or
building the rows of one exchange becomes that exchange's `requests` row, status `decode_error`, with
a reason naming the stage, the exception's class and the function that raised it; it is counted on
the summary's decode-error line and in the `captures` table, and every other exchange of the capture
gets the rows a clean run gives it.

The failure is injected into one Fetch exchange of produce_codecs.pcap (connection 15, correlation id
25, 15 `partitions` rows): its rows are made by compiled code (`exchange_rows`, whose failure leaves
the exchange to the Python path) and its partitions rows merged by the compiled walker (`merge_rows`)
into the Parquet writer, and by `merged_rows` elsewhere; all three are replaced with functions that
raise for that exchange alone.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import kwsniff
from kwsniff.cli import main
from kwsniff.pipeline.run import run_capture
from kwsniff.pipeline.session import SessionOptions
from kwsniff.rows import ListSink, builder, compiled
from kwsniff.spark.tasks import decode_task
from kwsniff.tables import DEFAULT_TABLES

CAPTURE = Path(__file__).parent / "data" / "captures" / "produce_codecs.pcap"
CONN, CORR = 15, 25  # a Fetch with 15 partitions
REASON = "rows: TypeError in merge_rows"


def fail_one_fetch(monkeypatch: pytest.MonkeyPatch) -> None:
    real_values, real_rows, real_exchange = compiled.merge_rows, builder.merged_rows, compiled.exchange_rows

    def exchange_rows(plan: Any, handler: Any, broker: Any, req: Any, *args: Any) -> Any:
        if (handler[1], req.correlation_id) == (CONN, CORR):
            raise TypeError("unsupported operand type(s) for -: 'int' and 'NoneType'")
        return real_exchange(plan, handler, broker, req, *args)

    def merge_rows(index: Any, base: Any, shared: dict[str, Any], *args: Any) -> Any:
        if (shared["conn_id"], shared["correlation_id"]) == (CONN, CORR):
            raise TypeError("unsupported operand type(s) for -: 'int' and 'NoneType'")
        return real_values(index, base, shared, *args)

    def merged_rows(api_key: int, reqi: Any, respi: Any, context: dict[str, Any]) -> Any:
        if (context["conn_id"], context["correlation_id"]) == (CONN, CORR):
            return merge_rows(None, None, context)
        return real_rows(api_key, reqi, respi, context)

    monkeypatch.setattr(compiled, "exchange_rows", exchange_rows)
    monkeypatch.setattr(compiled, "merge_rows", merge_rows)
    monkeypatch.setattr(builder, "merged_rows", merged_rows)


@pytest.fixture
def failing_fetch(monkeypatch: pytest.MonkeyPatch) -> None:
    fail_one_fetch(monkeypatch)


def read(out: Path) -> str:
    result = CliRunner().invoke(main, ["read", str(CAPTURE), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return result.output


def table(out: Path, name: str) -> pa.Table:
    return pq.read_table(out / name)


def without_exchange(t: pa.Table) -> pa.Table:
    failing = pc.and_(pc.equal(t["conn_id"], CONN), pc.equal(t["correlation_id"], CORR))
    return t.filter(pc.invert(failing))


def test_an_exchange_whose_rows_raise_is_its_decode_error_and_every_other_row_is_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clean_out = read(tmp_path / "clean")
    with monkeypatch.context() as m:
        fail_one_fetch(m)
        out = read(tmp_path / "failing")
    clean, failing = tmp_path / "clean", tmp_path / "failing"

    # The other exchanges' rows are the clean run's, value for value and in order.
    for name in ("requests", "partitions"):
        assert without_exchange(table(failing, name)).equals(without_exchange(table(clean, name))), name
    for name in ("errors", "groups"):
        files = sorted(p.relative_to(failing) for p in (failing / name).rglob("*.parquet"))
        assert files and [(clean / f).read_bytes() for f in files] == [
            (failing / f).read_bytes() for f in files
        ]
    assert table(failing, "partitions").num_rows == table(clean, "partitions").num_rows - 15
    # Its requests row alone: status decode_error, the stage and the exception, nothing guessed.
    row = table(failing, "requests").filter(pc.equal(table(failing, "requests")["correlation_id"], CORR))
    [row_dict] = [r for r in row.to_pylist() if r["conn_id"] == CONN]
    [clean_row] = [
        r for r in table(clean, "requests").to_pylist() if (r["conn_id"], r["correlation_id"]) == (CONN, CORR)
    ]
    assert clean_row["status"] == "ok"
    assert (row_dict["status"], row_dict["reason"]) == ("decode_error", REASON)
    kept = (
        "api_name",
        "client_id",
        "ts_request",
        "ts_response",
        "latency_ms",
        "request_bytes",
        "response_bytes",
    )
    assert {k: row_dict[k] for k in kept} == {k: clean_row[k] for k in kept}
    assert row_dict["max_wait_ms"] is None and row_dict["error_code"] is None
    # Its connection counts one more decode error; every other connection row is unchanged.
    conns = {r["conn_id"]: r for r in table(failing, "connections").to_pylist()}
    clean_conns = {r["conn_id"]: r for r in table(clean, "connections").to_pylist()}
    assert conns[CONN]["decode_errors"] == clean_conns[CONN]["decode_errors"] + 1
    conns[CONN]["decode_errors"] -= 1
    assert conns == clean_conns
    # The summary counts it on its decode-error lines; the `captures` row says it, as a warning.
    assert "requests 111: ok 109, no_response_expected 0, unanswered 1, response_cut 0, decode_error 1" in out
    assert f"decode errors: {REASON} 1" in out
    assert (
        "requests 111: ok 110, no_response_expected 0, unanswered 1, response_cut 0, decode_error 0"
        in clean_out
    )
    [capture] = table(failing, "captures").to_pylist()
    warning = f"1 exchange not decoded ({REASON}), a kwsniff bug: status decode_error"
    assert (capture["status"], capture["warnings"], capture["reason"]) == ("damaged", 1, warning)
    assert f"warning: produce_codecs.pcap: {warning}" in out


@pytest.mark.usefixtures("failing_fetch")
def test_show_prints_the_exchanges_after_one_whose_rows_raise() -> None:
    result = CliRunner().invoke(main, ["show", str(CAPTURE), "--json"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.output.splitlines() if line.startswith("{")]
    assert len(lines) == 111
    at = next(i for i, x in enumerate(lines) if (x["conn_id"], x["correlation_id"]) == (CONN, CORR))
    assert (lines[at]["status"], lines[at]["reason"]) == ("decode_error", REASON)
    # The exchanges after it are all printed (the last one, a Metadata request, was never answered).
    assert [x["status"] for x in lines[at + 1 :]] == ["ok"] * (len(lines) - at - 2) + ["unanswered"]
    assert len(lines) - at - 2 > 0
    text = CliRunner().invoke(main, ["show", str(CAPTURE)])
    assert text.exit_code == 0, text.output
    # Once in the exchange's text, once in the capture's warning.
    warning = f"kwsniff: warning: produce_codecs.pcap: 1 exchange not decoded ({REASON}), a kwsniff bug"
    assert text.output.count(REASON) == 2 and warning in text.output


@pytest.mark.usefixtures("failing_fetch")
def test_the_python_api_reads_past_an_exchange_whose_rows_raise() -> None:
    tables = kwsniff.read(CAPTURE)
    requests = tables["requests"].to_pylist()
    assert len(requests) == 111
    failed = [r for r in requests if r["status"] == "decode_error"]
    assert [(r["conn_id"], r["correlation_id"], r["reason"]) for r in failed] == [(CONN, CORR, REASON)]
    assert tables["partitions"].num_rows == 196 - 15
    [capture] = tables["captures"].to_pylist()
    assert capture["status"] == "damaged"
    assert tables.warnings == [
        f"produce_codecs.pcap: 1 exchange not decoded ({REASON}), a kwsniff bug: status decode_error"
    ]


def test_a_response_whose_decoding_raises_is_its_decode_error(monkeypatch: pytest.MonkeyPatch) -> None:
    real = builder.response_summary

    def response_summary(api_key: int, version: int, msg: dict[str, Any], options: Any) -> Any:
        if api_key == 3:  # Metadata: the first response of every connection that asks
            raise KeyError("brokers")
        return real(api_key, version, msg, options)

    monkeypatch.setattr(builder, "response_summary", response_summary)
    sink = ListSink()
    result = run_capture(CAPTURE, sink, SessionOptions())
    metadata = [r for r in sink.tables["requests"] if r["api_key"] == 3 and r["status"] != "unanswered"]
    assert metadata and {(r["status"], r["reason"]) for r in metadata} == {
        ("decode_error", "response: KeyError in response_summary")
    }
    assert len(sink.tables["requests"]) == 111
    assert result.decode_errors == {"response: KeyError in response_summary": len(metadata)}
    assert {r["status"] for r in sink.tables["requests"] if r["api_key"] != 3} == {"ok"}
    assert len(metadata) == 11


@pytest.mark.usefixtures("failing_fetch")
def test_a_spark_task_decodes_past_an_exchange_whose_rows_raise(tmp_path: Path) -> None:
    # The executor's side of `kwsniff spark` (no Spark needed): the capture is not failed, its other
    # rows are written, and its status carries the warning the driver puts in `captures`.
    status = decode_task(str(CAPTURE), 0, 1, SessionOptions(), tuple(DEFAULT_TABLES), str(tmp_path))
    assert status["error"] is None
    assert status["warnings"] == [f"1 exchange not decoded ({REASON}), a kwsniff bug: status decode_error"]
    assert (status["rows"]["requests"], status["rows"]["partitions"]) == (111, 196 - 15)


def test_a_cut_request_whose_decoding_raises_is_a_warning_of_its_capture(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A body cut by a snap length keeps the cut's reason (kafka.pairing says how much was missing);
    # the exception is still counted, and said in the capture's warning.
    cut = tmp_path / "cut160.pcap"
    subprocess.run(["editcap", "-F", "pcap", "-s", "160", str(CAPTURE), str(cut)], check=True, timeout=60)
    clean = run_capture(cut, ListSink(), SessionOptions())
    real = builder.decode_prefix

    def decode_prefix(api_key: int, version: int, response: bool, body: bytes) -> Any:
        if api_key == 0 and not response:  # every cut Produce request
            raise IndexError("index out of range")
        return real(api_key, version, response, body)

    monkeypatch.setattr(builder, "decode_prefix", decode_prefix)
    sink = ListSink()
    result = run_capture(cut, sink, SessionOptions())
    produce = [r for r in sink.tables["requests"] if r["api_key"] == 0 and r["status"] == "decode_error"]
    assert produce and all(r["reason"].startswith("request: not captured (snap length): ") for r in produce)
    assert result.warnings == [
        f"{len(produce)} exchanges not decoded (request: IndexError in decode_prefix), a kwsniff bug: "
        "status decode_error"
    ]
    assert result.status == clean.status and len(sink.tables["requests"]) == sum(clean.status.values())
