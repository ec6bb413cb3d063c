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
from kwsniff.pipeline.run import run_capture
from kwsniff.view.render import ExchangeFilter, json_line, tree_text


class PrintingSink:
    """Prints each matching exchange the moment its row is built; keeps no rows (bounded memory)."""

    def __init__(self, out: TextIO, match: ExchangeFilter, as_json: bool) -> None:
        self.out = out
        self.match = match
        self.as_json = as_json
        self.printed = 0

    def add(self, table: str, row: dict[str, Any]) -> None:
        if table != "requests" or not self.match.matches(row):
            return
        if self.as_json:
            self.out.write(json_line(row) + "\n")
        else:
            self.out.write(("\n" if self.printed else "") + tree_text(row) + "\n")
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
@click.option("--client-id", help="Only exchanges of this client id.")
@click.option("--conn", "conn_id", type=int, help="Only this connection (conn_id of the tables).")
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
    )
    sink = PrintingSink(sys.stdout, match, as_json)
    options = session_options(decoding, broker_ports=broker_ports(broker_port))
    try:
        result = run_capture(capture, sink, options, keep_messages=True)
        sys.stdout.flush()
    except CaptureError as exc:
        messages.error(str(exc))
        sys.exit(1)
    except BrokenPipeError:
        _silence_stdout()
        return
    messages.warnings(result.name, result.warnings)
