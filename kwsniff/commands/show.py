"""`kwsniff show`: every decoded exchange of a capture, Wireshark-style or as JSON lines."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, TextIO

import click

from kwsniff.capture import CaptureError
from kwsniff.commands import messages
from kwsniff.commands.options import (
    API,
    Decoding,
    broker_port_option,
    broker_ports,
    decoding_options,
    session_options,
)
from kwsniff.commands.values import MAX_SECONDS, BoundedInt, FiniteFloat
from kwsniff.pipeline.run import run_capture
from kwsniff.view.render import (
    ExchangeFilter,
    exchange_json,
    exchange_names,
    json_text,
    record_json,
    record_lines,
    tree_text,
)
from kwsniff.view.summary import STATUSES


class PrintingSink:
    """Prints each matching exchange once its rows are built; keeps no rows (bounded memory).

    Without --topic, --group or --records an exchange is printed the moment its `requests` row is
    built. With them it waits for the rows built right after it (its `partitions` rows name topics
    that the messages give only by id; its `records` rows hold the records) and is printed when the
    next exchange completes, or at the end (:meth:`close`)."""

    def __init__(self, out: TextIO, match: ExchangeFilter, as_json: bool, records: bool = False) -> None:
        self.out = out
        self.match = match
        self.as_json = as_json
        self.records = records
        self.printed = 0
        self.waits = records or match.needs_names
        # The exchange waiting for its rows: its requests row, topics, groups and records.
        self.pending: tuple[dict[str, Any], set[str], set[str], list[dict[str, Any]]] | None = None

    def add(self, table: str, row: dict[str, Any]) -> None:
        if table == "requests":
            if not self.waits:
                if self.match.matches(row):
                    self._print(row, None)
                return
            self.close()
            topics, groups = exchange_names(row) if self.match.needs_names else (set(), set())
            self.pending = (row, topics, groups, [])
            return
        pending = self.pending
        if pending is None or table not in ("partitions", "groups", "records"):
            return
        first = pending[0]
        if row["conn_id"] != first["conn_id"] or row["correlation_id"] != first["correlation_id"]:
            return  # a row held until its topic id was named: its exchange was decided without it
        if table == "records":
            pending[3].append(row)
        elif table == "groups" and row.get("group_id"):
            pending[2].add(row["group_id"])
        elif table == "partitions" and row.get("topic"):
            pending[1].add(row["topic"])

    def close(self) -> None:
        """Print the exchange waiting for its rows, if it matches."""
        if self.pending is not None:
            row, topics, groups, records = self.pending
            self.pending = None
            if self.match.matches(row, frozenset(topics), frozenset(groups)):
                self._print(row, records if self.records else None)

    def _print(self, row: dict[str, Any], records: list[dict[str, Any]] | None) -> None:
        if self.as_json:
            line = exchange_json(row)
            if records is not None:
                line["records"] = [record_json(r) for r in records]
            self.out.write(json_text(line) + "\n")
        else:
            text = tree_text(row)
            if records:
                text += "\n" + "\n".join(record_lines(records))
            self.out.write(("\n" if self.printed else "") + text + "\n")
        self.printed += 1


def _silence_stdout() -> None:
    # The reader went away (`| head`): send what is still buffered to /dev/null so the interpreter's
    # final flush does not raise BrokenPipeError again on exit (Python docs, "Note on SIGPIPE").
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


@click.command()
@click.argument("capture", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="One JSON object per exchange per line.")
@click.option(
    "--api",
    "apis",
    type=API,
    multiple=True,
    metavar="NAME",
    help="Only this API (name, any case, or key number; repeatable).",
)
@click.option(
    "--client",
    "--client-id",
    "client_id",
    help="Only exchanges of this client id (--client-id: the old name).",
)
@click.option("--conn", "conn_id", type=BoundedInt(0), help="Only this connection (conn_id of the tables).")
@click.option(
    "--topic", help="Only exchanges naming this topic (in the request or response, or by topic id)."
)
@click.option(
    "--group",
    help="Only exchanges of this consumer group (group_id or group_ids in the request, FindCoordinator's key).",
)
@click.option(
    "--min-latency",
    "min_latency_ms",
    type=FiniteFloat(min=0, max=MAX_SECONDS * 1000),
    metavar="MS",
    help="Only exchanges answered in MS milliseconds or more (unanswered ones have no latency).",
)
@click.option(
    "--status",
    "statuses",
    type=click.Choice(STATUSES),
    multiple=True,
    help="Only exchanges of this status (repeatable).",
)
@click.option(
    "--records",
    is_flag=True,
    help="Also print each Produce and Fetch exchange's records: key and value as text where valid "
    "UTF-8 (control characters escaped), else hex.",
)
@click.option(
    "--errors-only",
    is_flag=True,
    help="Only exchanges with a non-zero error code anywhere in the response, or that were "
    "unanswered or undecodable (acks=0 Produce requests without a response are not errors).",
)
@broker_port_option
@decoding_options
def show(
    capture: Path,
    as_json: bool,
    apis: tuple[str, ...],
    client_id: str | None,
    conn_id: int | None,
    topic: str | None,
    group: str | None,
    min_latency_ms: float | None,
    statuses: tuple[str, ...],
    records: bool,
    errors_only: bool,
    broker_port: tuple[int, ...],
    decoding: Decoding,
) -> None:
    """Print every request and response of CAPTURE with every decoded field."""
    match = ExchangeFilter(
        apis=frozenset(apis),
        client_id=client_id,
        conn_id=conn_id,
        errors_only=errors_only,
        topic=topic,
        group=group,
        min_latency_ms=min_latency_ms,
        statuses=frozenset(statuses),
    )
    sink = PrintingSink(sys.stdout, match, as_json, records)
    fields = {"records": True, "record_payloads": True} if records else {}
    options = session_options(decoding, broker_ports=broker_ports(broker_port), **fields)
    try:
        result = run_capture(capture, sink, options, keep_messages=True)
        sink.close()
        sys.stdout.flush()
    except CaptureError as exc:
        messages.error(str(exc))
        sys.exit(1)
    except BrokenPipeError:
        _silence_stdout()
        return
    messages.warnings(result.name, result.warnings)
