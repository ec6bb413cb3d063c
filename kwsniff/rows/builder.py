"""Rows of the kwsniff tables, built from paired exchanges. Plain dicts; no pyarrow here.

The session hands every connection an :class:`ExchangeRows` (a ConversationHandler). Each frame is
decoded exactly once, when it arrives; a request keeps only its small summary (``req.info``) while it
waits for its response, so memory grows with in-flight requests, not with frame sizes.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from functools import partial
from typing import Any, Protocol

from kwsniff.defaults import PAST_INT64
from kwsniff.kafka import DECODE_ERROR, OK, RESPONSE_CUT, ConversationHandler, Request, Response
from kwsniff.kafka.sasl import Secrets, redact
from kwsniff.memory import RECORDS, ROW_COST, ROWS
from kwsniff.net import format_ip
from kwsniff.protocol import (
    DecodeError,
    api_name,
    decode_request,
    decode_request_view,
    decode_response,
    decode_response_view,
    error_name,
    removed_in,
)
from kwsniff.protocol.partial import decode_prefix
from kwsniff.rows import compiled
from kwsniff.rows.brokers import BROKER_SOURCES, MAX_HELD_BROKER_ROWS, BrokerDirectory, BrokerIds
from kwsniff.rows.extract import error_rows, request_summary, response_summary
from kwsniff.rows.failed_exchange import RUN_ERRORS, failed_reason, is_failed_reason
from kwsniff.rows.groups import (
    GROUP_APIS,
    group_request,
    group_response,
    group_row,
    spell_topics,
    topic_ids_of,
)
from kwsniff.rows.metadata_log import metadata_log_rows
from kwsniff.rows.partitions import (
    COUNTS_ONLY,
    MAX_HELD_ROWS,
    PAST_INT64_KEY,
    RecordOptions,
    TopicNames,
    merged_rows,
    records_of,
)

API_VERSIONS = 18
# Record-level damage columns of `partitions` rows: batches that failed their CRC, were not
# decompressed past the cap, or were otherwise unreadable (nesting too deep, bad lengths...).
_RECORD_DAMAGE = ("crc_errors", "capped_batches", "record_errors")
# Connection counters summed over a capture for the end-of-run summary.
# The `connections` table's per-direction byte counts, `{kind}_bytes_{direction}`: the accounting
# invariant's terms (docs/accounting.md) and the TLS plaintext (the table's schema names them too).
DIRECTIONS = ("to_broker", "to_client")
DIRECTION_BYTE_KINDS = (
    "stream",
    "gap",
    "skipped",
    "sasl",
    "tls_overhead",
    "encrypted",
    "not_kafka",
    "decrypted",
)
DIRECTION_BYTES = tuple(f"{kind}_bytes_{d}" for d in DIRECTIONS for kind in DIRECTION_BYTE_KINDS)
_TOTALLED = (
    "frames_to_broker",
    "frames_to_client",
    "frame_bytes_to_broker",
    "frame_bytes_to_client",
    "bytes_to_broker",
    "bytes_to_client",
    "duplicate_bytes",
    "gaps",
    "gap_bytes",
    "implausible_gaps",
    "skipped_bytes",
    "not_kafka_bytes",
    "resyncs",
    "orphan_responses",
    "sasl_tokens",
    *DIRECTION_BYTES,
)


def _decode(
    decode: Callable[[int, int, memoryview | bytes], dict[str, Any]],
    key: int,
    version: int,
    body: memoryview | bytes,
) -> tuple[dict[str, Any], str | None]:
    """Decode a body; bytes after a complete message are noted, not fatal. Brokers read a message
    and ignore what follows it (librdkafka 2.16's admin client sends 3 extra bytes after some
    Metadata v12 requests), so a sniffer reports them and keeps the message."""
    try:
        return decode(key, version, body), None
    except DecodeError as exc:
        if exc.reason != "trailing bytes":
            raise
        return decode(
            key, version, body[: exc.offset]
        ), f"{len(body) - exc.offset} trailing bytes at offset {exc.offset}"


class RowSink(Protocol):
    def add(self, table: str, row: dict[str, Any]) -> None: ...


class ListSink:
    """Keeps every row in memory, per table: for tests, `show` and small captures."""

    def __init__(self) -> None:
        self.tables: dict[str, list[dict[str, Any]]] = defaultdict(list)

    def add(self, table: str, row: dict[str, Any]) -> None:
        self.tables[table].append(row)


class TableBuilder:
    """Per capture: hands out per-connection handlers and keeps the run's totals."""

    def __init__(
        self,
        capture: str,
        sink: RowSink,
        *,
        keep_messages: bool = False,
        record_options: RecordOptions = COUNTS_ONLY,
        brokers: BrokerDirectory | None = None,
    ) -> None:
        self.capture = capture
        self.sink = sink
        self.keep_messages = keep_messages
        self.record_options = record_options
        # Kept messages outlive their frames, so they need copies of their record data.
        self.decode_request = decode_request if keep_messages else decode_request_view
        self.decode_response = decode_response if keep_messages else decode_response_view
        # Produce and Fetch summaries straight from the body (kwsniff/rows/compiled.py), unless the
        # decoded message or its records are wanted.
        self.compiled = compiled.AVAILABLE and not keep_messages and not record_options.records
        # `partitions` rows merged by compiled code straight into a sink that takes rows as values in
        # schema order (the Parquet writer): (add_values, column -> position, columns), or None.
        self.partition_values: tuple[Any, dict[str, int], tuple[str, ...]] | None = None
        # A Produce or Fetch exchange's `requests` and `partitions` rows made by compiled code as values
        # in the sink's order (compiled.exchange_rows), where the sink takes both tables' rows so.
        self.exchange_plan: Any = None
        add_values = getattr(sink, "add_values", None)
        self.add_many_values = getattr(sink, "add_many_values", None)
        columns_of = getattr(sink, "columns", None)
        if (
            compiled.AVAILABLE
            and add_values
            and self.add_many_values
            and columns_of
            and "partitions" in getattr(sink, "names", {})
        ):
            columns: tuple[str, ...] = columns_of("partitions")
            self.partition_values = (add_values, {c: i for i, c in enumerate(columns)}, columns)
            if self.compiled and "requests" in getattr(sink, "values_tables", ()):
                self.exchange_plan = compiled.exchange_plan(columns_of("requests"), columns, OK)
        self.status = Counter[str]()
        self.undecodable_frames = 0
        self.decode_errors = Counter[str]()
        # A Parquet sink's notes (values it had to leave null, sinks/parquet.py) are the capture's.
        notes = getattr(sink, "notes", None)
        self.notes: Counter[str] = notes if isinstance(notes, Counter) else Counter()
        # Exchanges whose decoding or rows raised (a kwsniff bug), by reason: warnings of the capture.
        self.failed_exchanges = Counter[str]()
        self.record_damage = Counter[str]()  # over all `partitions` rows, for the summary and --strict
        # Node ids of broker addresses (the run's directory, docs/tables.md "Which broker answered"):
        # requests, partitions, errors and groups rows go through it, held while their broker has none.
        # `show` prints each exchange as it completes, so it does not hold.
        self.node_ids = BrokerIds(
            sink,
            brokers if brokers is not None else BrokerDirectory(),
            hold=not keep_messages,
            max_held=held_broker_rows(record_options.budget),
        )
        # Topic ids to names (KIP-516) and the partitions/records rows waiting for a name; named rows
        # go on to the node ids.
        budget = record_options.budget
        self.topics = TopicNames(self.node_ids, held_topic_rows(budget), budget)
        self.topic_names: dict[Any, str] = self.topics.names
        self.totals = Counter[str]()
        self.budget = record_options.budget
        # Requests holding `records` rows for their response's offsets, oldest first (by id()).
        self.holding: dict[int, tuple[ExchangeRows, Request]] = {}

    def failure_warnings(self) -> list[str]:
        """The capture's warnings for exchanges whose decoding or rows raised (a kwsniff bug): each is
        a `requests` row with status decode_error and this reason, and the capture goes on."""
        return [
            f"{n:,} exchange{'s' if n > 1 else ''} not decoded ({reason}), a kwsniff bug: status decode_error"
            for reason, n in self.failed_exchanges.items()
        ]

    def relieve_records(self) -> None:
        """The records pool is over its cap: the oldest requests waiting for a response write their
        records now, without offsets (as acks=0 requests do), and are counted (docs/memory.md)."""
        budget = self.budget
        holding = self.holding
        while holding and budget is not None and budget.over(RECORDS):
            rows, req = holding.pop(next(iter(holding)))
            parts = req.info.get("partitions", {}).values() if isinstance(req.info, dict) else ()
            written, held = rows._write_records(req, parts)
            self.totals["records_written_early"] += written
            self.totals["records_written_early_bytes"] += held

    def handler_for(self, conn: Any) -> ExchangeRows:
        rows = ExchangeRows(
            self, conn.conn_id, format_ip(conn.client[0]), (format_ip(conn.broker[0]), conn.broker[1])
        )
        if self.keep_messages:
            # `show` prints each exchange as it completes, long before the connection row exists.
            rows.endpoints = {
                "client_ip": format_ip(conn.client[0]),
                "client_port": conn.client[1],
                "broker_ip": format_ip(conn.broker[0]),
                "broker_port": conn.broker[1],
            }
        return rows

    def connection_closed(self, conn_id: int, row: dict[str, Any]) -> None:
        totals = self.totals
        for key in _TOTALLED:
            totals[key] += row[key]
        totals["connections"] += 1
        totals["kafka_connections"] += row["kafka"]
        if row["kafka"]:
            # What `read --strict` holds against a capture: bytes of Kafka connections not decoded.
            totals["kafka_gap_bytes"] += row["gap_bytes"]
            # Undecryptable bytes count against `--strict` only where the key log had the keys:
            # a connection with no key (or no handshake) is left encrypted on purpose.
            if row["tls_state"] in ("decrypted", "bad_key", "gap"):
                totals["kafka_encrypted_bytes"] += (
                    row["encrypted_bytes_to_broker"] + row["encrypted_bytes_to_client"]
                )
        self.sink.add("connections", {"capture": self.capture, "conn_id": conn_id, **row})

    def finish(self, session: Any) -> None:
        """End of the capture: rows held for a topic name are written, named or not."""
        topics = self.topics
        topics.finish()
        self.totals["held_rows_overflow"] = topics.held_overflow
        self.totals["unresolved_topic_rows"] = topics.unresolved
        self.totals["topic_names_evicted"] = topics.evicted
        self.totals["topic_names_evicted_bytes"] = topics.evicted_bytes
        topics.release()
        node_ids = self.node_ids
        node_ids.finish()
        self.totals["broker_held_rows_overflow"] = node_ids.held_overflow
        self.totals["unresolved_broker_rows"] = node_ids.unresolved


def held_broker_rows(budget: Any) -> int:
    """Rows a capture may hold for their broker's node id: a quarter of the row buffers' share of
    --memory-limit at ROW_COST a row (16,384 at the default 1 GiB), at most MAX_HELD_BROKER_ROWS."""
    if budget is None:
        return MAX_HELD_BROKER_ROWS
    return max(1_000, min(MAX_HELD_BROKER_ROWS, budget.cap(ROWS) // ROW_COST // 4))


def held_topic_rows(budget: Any) -> int:
    """Rows a capture may hold for their topic's name: another quarter of the row buffers' share of
    --memory-limit at ROW_COST a row (16,384 at the default 1 GiB), at most MAX_HELD_ROWS."""
    if budget is None:
        return MAX_HELD_ROWS
    return max(1_000, min(MAX_HELD_ROWS, budget.cap(ROWS) // ROW_COST // 4))


class ExchangeRows(ConversationHandler):
    """Decodes the frames of one connection and writes `requests` and `errors` rows."""

    def __init__(
        self,
        tables: TableBuilder,
        conn_id: int,
        client_ip: str | None = None,
        broker: tuple[str, int] | None = None,
    ) -> None:
        self.tables = tables
        self.conn_id = conn_id
        self.client_ip = client_ip
        # The connection's broker end, on every row of its exchanges (broker_id: BrokerIds fills it).
        self.broker = broker
        self.broker_fields: dict[str, Any] = {
            "broker_ip": broker[0] if broker else None,
            "broker_port": broker[1] if broker else None,
            "broker_id": None,
        }
        self.fixed = (tables.capture, conn_id, client_ip)  # compiled.exchange_rows' view of the above
        self.client_id: str | None = None
        self.client_software_name: str | None = None
        self.client_software_version: str | None = None
        self.unanswered = 0
        self.no_response_expected = 0
        self.decode_errors = 0
        self.undecodable_frames = 0
        self.endpoints: dict[str, Any] = {}
        # The connection's SASL secrets (kafka.sasl.Secrets): no string of a response keeps them.
        self.secrets: Secrets | None = None

    def use_secrets(self, secrets: Secrets) -> None:
        self.secrets = secrets

    # -- ConversationHandler -------------------------------------------------------------------------
    def request(self, req: Request, body: memoryview | bytes) -> None:
        if self.client_id is None:
            self.client_id = req.client_id
        if self.tables.budget is not None:
            self.tables.budget.frame_records = 0
        self._guarded("request", req, self._request, req, body)

    def _request(self, req: Request, body: memoryview | bytes) -> None:
        tables = self.tables
        if tables.compiled and not req.missing and req.api_key in compiled.FIRST_VERSION:
            fast = compiled.request_info(req.api_key, req.api_version, body)
            if fast is not None:
                req.info = fast
                return
        try:
            whole = True
            if req.missing:
                (msg, whole), note = decode_prefix(req.api_key, req.api_version, False, bytes(body)), None
            else:
                msg, note = _decode(self.tables.decode_request, req.api_key, req.api_version, body)
        except DecodeError as exc:
            req.error = f"request: {exc}"
            req.info = {}
            return
        info = request_summary(req.api_key, req.api_version, msg, self.tables.record_options)
        if not whole and "record_count" in info:
            info["record_count"] = info["record_bytes"] = None  # partitions the cut left out had records
        if info.get("acks") == 0 and self.tables.record_options.records:
            # acks=0: no response will assign offsets, and the request may wait for the end of the
            # connection; its records are written now rather than held.
            self._write_records(req, info.get("partitions", {}).values())
        elif tables.budget is not None and any(p.get("_held") for p in info.get("partitions", {}).values()):
            tables.holding[id(req)] = (self, req)
            tables.relieve_records()
        if note:
            info["note"] = f"request: {note}"
        if req.api_key == API_VERSIONS and req.api_version >= 3:
            # KIP-511: ApiVersions v3+ requests name the client software.
            self.client_software_name = msg.get("client_software_name")
            self.client_software_version = msg.get("client_software_version")
        if req.api_key in GROUP_APIS and not req.missing:  # group events need whole messages
            info["group"] = group_request(req.api_key, msg)
        if self.tables.keep_messages:
            # Credentials (SASL tokens, SCRAM salted passwords...) never leave the decoder.
            info["message"] = redact(req.api_key, msg)
        req.info = info

    def response(self, req: Request, resp: Response, body: memoryview | bytes) -> None:
        if self.tables.budget is not None:
            self.tables.budget.frame_records = 0
        self._guarded("response", resp, self._response, req, resp, body)

    def _guarded(
        self, stage: str, message: Request | Response, work: Callable[..., None], *args: Any
    ) -> None:
        """``work(*args)``, decoding one side of an exchange; an exception of a decoder bug becomes
        ``message``'s decode_error (its reason: the stage and the exception's class) and the capture
        goes on. Counted here: the reason of a cut request is replaced by the cut's (kafka.pairing)."""
        try:
            work(*args)
        except RUN_ERRORS:
            raise
        except Exception as exc:
            reason = failed_reason(stage, exc)
            message.error, message.info = reason, {}
            self.tables.failed_exchanges[reason] += 1

    def _response(self, req: Request, resp: Response, body: memoryview | bytes) -> None:
        if self.tables.compiled and not resp.missing and req.api_key in compiled.FIRST_VERSION:
            fast = compiled.response_info(req.api_key, req.api_version, body)
            if fast is not None:
                fast["error_count"] = 0  # the walker answers only for bodies without an error code
                resp.info = self.secrets.clean(fast) if self.secrets else fast
                return
        try:
            whole = True
            if resp.missing:
                (msg, whole), note = decode_prefix(req.api_key, req.api_version, True, bytes(body)), None
            else:
                msg, note = _decode(self.tables.decode_response, req.api_key, req.api_version, body)
        except DecodeError as exc:
            resp.error = f"response: {exc}"
            resp.info = {}
            return
        if self.secrets:
            # Before any row is made of it: a broker may echo the client's password in any string.
            self.secrets.clean(msg)
        info = response_summary(req.api_key, req.api_version, msg, self.tables.record_options)
        if isinstance(req.info, dict) and req.info.get("fetcher") == "metadata":
            metadata_log_rows(msg, info, self.tables.record_options)
        if not whole and "record_count" in info:
            info["record_count"] = info["record_bytes"] = None  # partitions the cut left out had records
        if note:
            info["note"] = f"response: {note}"
        if req.api_key in GROUP_APIS and not resp.missing:
            info["group"] = group_response(req.api_key, msg)
        if self.tables.keep_messages:
            # Credentials (SASL tokens, SCRAM salted passwords...) never leave the decoder.
            info["message"] = redact(req.api_key, msg)
        resp.info = info
        self.tables.topics.learn(info.get("topic_ids", {}))
        if req.api_key in BROKER_SOURCES and self.broker is not None and whole:
            # Only from a whole response: a broker list a snap length cut may lack the broker that
            # answered, and elimination over it would name the wrong one.
            self.tables.node_ids.learn(req.api_key, msg, self.broker)
        context = self._context(req)
        group_id = req.info.get("group_id") if isinstance(req.info, dict) else None
        errors = error_rows(req.api_key, req.api_version, msg, group_id, self.tables.topic_names)
        # A count over the response: unknown unless the whole body was read (an error may lie past
        # a snap length's cut), never the count of what was kept.
        info["error_count"] = None if resp.missing else len(errors)
        if errors:
            info["first_error_code"] = errors[0]["error_code"]
            info["first_error_name"] = errors[0]["error_name"]
        exchange = self._exchange(req, resp)
        node_ids = self.tables.node_ids
        for row in errors:
            node_ids.add("errors", {**context, **row, **exchange, **self._broker()})

    def exchange(self, req: Request, resp: Response | None, status: str) -> None:
        if self.client_id is None:
            # A request whose body was never read (a snap length cut its header) still names its client.
            self.client_id = req.client_id
        tables = self.tables
        if tables.holding:
            tables.holding.pop(id(req), None)
        reqi: dict[str, Any] = req.info if isinstance(req.info, dict) else {}
        respi: dict[str, Any] = resp.info if resp is not None and isinstance(resp.info, dict) else {}
        if (
            tables.exchange_plan is not None
            and status == OK
            and resp is not None
            and self._compiled(req, resp, reqi, respi)
        ):
            return
        # Every row of the exchange is made before one is written: an exchange whose rows raise (a
        # kwsniff bug) writes its requests row alone, as decode_error, and the capture goes on.
        try:
            row, write = self._rows(req, resp, status, reqi, respi)
        except RUN_ERRORS:
            raise
        except Exception as exc:
            status, write, reason = DECODE_ERROR, None, failed_reason("rows", exc)
            tables.failed_exchanges[reason] += 1
            row = self._requests_row(req, resp, status, {}, {}, reason, self._who({}))
        self._count(req, resp, status, row["reason"])
        tables.node_ids.add("requests", row)
        if write is not None:
            write()

    def _compiled(self, req: Request, resp: Response, reqi: dict[str, Any], respi: dict[str, Any]) -> bool:
        """The exchange's rows written by compiled code (compiled.exchange_rows: a Produce or Fetch
        exchange, ok, with nothing to note or hold) and counted as _count counts them; False: the
        Python path writes them."""
        tables = self.tables
        try:
            fast = compiled.exchange_rows(
                tables.exchange_plan, self.fixed, self._broker(), req, resp, reqi, respi, tables.topic_names
            )
        except RUN_ERRORS:
            raise
        except Exception:
            return False  # a kwsniff bug: the Python path meets it again and says so
        if fast is None:
            return False
        tables.status[OK] += 1
        tables.sink.add_values("requests", fast[0])  # type: ignore[attr-defined]
        if fast[1] is not None:
            tables.add_many_values("partitions", fast[1])  # type: ignore[misc]
        return True

    def _count(self, req: Request, resp: Response | None, status: str, reason: str | None) -> None:
        tables = self.tables
        tables.status[status] += 1
        if status == "unanswered" or status == RESPONSE_CUT:
            self.unanswered += 1
        elif status == "no_response_expected":
            self.no_response_expected += 1
        elif status == DECODE_ERROR:
            self.decode_errors += 1
        if reason and status == DECODE_ERROR:
            if is_failed_reason(reason):
                # A kwsniff bug met by this exchange (a warning of the capture too): counted whole.
                tables.decode_errors[reason] += 1
                return
            # "request: not captured (snap length): N of M bytes missing" counts under its first two
            # parts; other reasons under their side ("request", "response").
            cut = ": not captured (snap length): " in reason  # kwsniff.kafka.pairing's words
            tables.decode_errors[reason.rsplit(":", 1)[0] if cut else reason.split(":")[0]] += 1
        elif reason and (req.cut or (resp is not None and resp.cut)):
            pass  # a capture edge, counted by its status
        elif reason:
            # Decoded, with something worth a look (e.g. trailing bytes): a note, not an error.
            tables.notes[reason.split(" at offset")[0]] += 1

    def _rows(
        self, req: Request, resp: Response | None, status: str, reqi: dict[str, Any], respi: dict[str, Any]
    ) -> tuple[dict[str, Any], Callable[[], None] | None]:
        """The exchange's requests row, and what writes its groups and partitions rows (made already)."""
        reason = (
            req.error
            or (resp.error if resp is not None else None)
            or req.cut
            or (resp.cut if resp is not None else None)
            or reqi.get("note")
            or respi.get("note")
        )
        context = self._context(req)
        exchange = self._exchange(req, resp)  # on its partitions, errors and groups rows too
        who = self._who(reqi)
        broker = self._broker()
        row = self._requests_row(req, resp, status, reqi, respi, reason, who, context, exchange, broker)
        group = None
        if "group" in reqi:
            group = group_row(
                {**context, "client_id": req.client_id, "client_ip": self.client_ip, **broker},
                reqi.get("group_id"),
                reqi["group"],
                respi.get("group"),
                respi.get("error_code"),
                req.ts_last,
                resp.ts_first if resp is not None else None,
            )
        shared = {**context, **exchange, **who, **broker}
        tables = self.tables
        if (
            tables.partition_values is not None
            and req.api_key in compiled.FIRST_VERSION
            and "group_id" not in reqi
            and "member_epoch" not in reqi
        ):
            values = self._partition_values(req.api_key, reqi, respi, shared)
            if values is None and group is None:
                return row, None
            return row, partial(self._write_values, req.api_key, group, values, shared, context)
        prows = list(merged_rows(req.api_key, reqi, respi, shared))
        if not prows and group is None:
            return row, None
        return row, partial(self._write_rows, req.api_key, group, prows, context)

    def _who(self, reqi: dict[str, Any]) -> dict[str, Any]:
        # Who sent a Fetch (extract.fetcher), on its requests and partitions rows; null on other APIs.
        # The sender's node id of a KRaft or AlterPartition request (extract.node), on both too.
        return {
            "replica_id": reqi.get("replica_id"),
            "fetcher": reqi.get("fetcher"),
            "node_id": reqi.get("node_id"),
        }

    def _requests_row(
        self,
        req: Request,
        resp: Response | None,
        status: str,
        reqi: dict[str, Any],
        respi: dict[str, Any],
        reason: str | None,
        who: dict[str, Any],
        context: dict[str, Any] | None = None,
        exchange: dict[str, Any] | None = None,
        broker: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        error_code = respi.get("error_code")
        row = {
            **(context if context is not None else self._context(req)),
            **(exchange if exchange is not None else self._exchange(req, resp)),
            **who,
            **(broker if broker is not None else self._broker()),
            "request_bytes": req.size,
            "response_bytes": resp.size if resp is not None else None,
            "throttle_time_ms": respi.get("throttle_time_ms"),
            "error_code": error_code,
            "error_name": error_name(error_code) if error_code is not None else None,
            "error_count": respi.get("error_count"),
            "first_error_code": respi.get("first_error_code"),
            "first_error_name": respi.get("first_error_name"),
            "acks": reqi.get("acks"),
            "max_wait_ms": reqi.get("max_wait_ms"),
            "record_count": reqi.get("record_count", respi.get("record_count")),
            "record_bytes": reqi.get("record_bytes", respi.get("record_bytes")),
            "status": status,
            "reason": reason,
            "producer_id": reqi.get("producer_id"),
            "producer_epoch": reqi.get("producer_epoch"),
            "producer_id_response": respi.get("producer_id_response"),
            "producer_epoch_response": respi.get("producer_epoch_response"),
            "removed_in": removed_in(req.api_key, req.api_version),
            "broker_epoch": reqi.get("broker_epoch", respi.get("broker_epoch")),
            "fenced": respi.get("fenced"),
            # KIP-1242 (the `misrouted` report section): what an ApiVersions v5 request intended, and
            # the cluster id a Metadata or DescribeCluster response reported.
            "intended_cluster_id": reqi.get("intended_cluster_id"),
            "intended_node_id": reqi.get("intended_node_id"),
            "cluster_id": respi.get("cluster_id"),
        }
        if self.tables.keep_messages:
            row.update(self.endpoints)
            row["request"] = reqi.get("message")
            row["response"] = respi.get("message")
        return row

    def _partition_values(
        self, api_key: int, reqi: dict[str, Any], respi: dict[str, Any], shared: dict[str, Any]
    ) -> tuple[list[tuple[Any, ...] | None], list[list[dict[str, Any]]] | None] | None:
        """Produce and Fetch `partitions` rows merged by compiled code (kwsniff/rows/compiled.py) as
        values in schema order: no row dict. A row it leaves (None: records kept, record damage, an
        error code, a topic id not named yet) is built by merged_rows, in its place (the second list,
        by position; None when there is none)."""
        req_parts = reqi.get("partitions") or {}
        resp_parts = respi.get("partitions") or {}
        if not req_parts and not resp_parts:
            return None
        tables = self.tables
        assert tables.partition_values is not None
        _, index, columns = tables.partition_values
        base = tuple(map(shared.get, columns))
        rows = compiled.merge_rows(index, base, shared, req_parts, resp_parts, api_key, tables.topics.names)
        if None not in rows:
            return rows, None
        keys = list(dict.fromkeys([*req_parts, *resp_parts]) if resp_parts else req_parts)
        built: list[list[dict[str, Any]]] = []
        for key, values in zip(keys, rows, strict=True):
            if values is not None:
                built.append([])
                continue
            one_req = {**reqi, "partitions": {key: req_parts[key]} if key in req_parts else {}}
            one_resp = {**respi, "partitions": {key: resp_parts[key]} if key in resp_parts else {}}
            built.append(list(merged_rows(api_key, one_req, one_resp, shared)))
        return rows, built

    def _write_values(
        self,
        api_key: int,
        group: dict[str, Any] | None,
        values: tuple[list[tuple[Any, ...] | None], list[list[dict[str, Any]]] | None] | None,
        shared: dict[str, Any],
        context: dict[str, Any],
    ) -> None:
        if group is not None:
            self._write_group(group)
        if values is None:
            return
        rows, built = values
        tables = self.tables
        assert tables.partition_values is not None
        add, index, _ = tables.partition_values
        node_ids = tables.node_ids
        if shared.get("broker_id") is None and node_ids.hold and self.broker is not None:
            # The broker has no node id yet: BrokerIds holds these rows as it holds row dicts.
            endpoint, at = self.broker, index["broker_id"]

            def add(table: str, values: tuple[Any, ...]) -> None:
                node_ids.add_values(table, values, endpoint, at)

        elif built is None and tables.add_many_values is not None:
            tables.add_many_values("partitions", rows)
            return
        for at_key, row in enumerate(rows):
            if row is not None:
                add("partitions", row)
            elif built is not None:
                for prow in built[at_key]:
                    self._partition_row(api_key, prow, context)

    def _write_rows(
        self, api_key: int, group: dict[str, Any] | None, prows: list[dict[str, Any]], context: dict[str, Any]
    ) -> None:
        if group is not None:
            self._write_group(group)
        for prow in prows:
            self._partition_row(api_key, prow, context)

    def _write_group(self, group: dict[str, Any]) -> None:
        # KIP-848 assignments name topics by id: written once the topic-id map names them.
        self.tables.topics.add_spelled("groups", group, topic_ids_of(group), spell_topics)

    def _partition_row(self, api_key: int, prow: dict[str, Any], context: dict[str, Any]) -> None:
        tables = self.tables
        topics = tables.topics
        records = None
        if "_records" in prow:
            self._release(prow.pop("_held", 0))
            records = records_of(api_key, prow, context)
        if PAST_INT64_KEY in prow:
            tables.notes[PAST_INT64] += prow.pop(PAST_INT64_KEY)
        if prow.get("crc_errors") or prow.get("capped_batches") or prow.get("record_errors"):
            for key in _RECORD_DAMAGE:
                tables.record_damage[key] += prow.get(key) or 0
        if records:
            # Named (or held for a name) like their partitions row, before that row is named.
            topics.add("records", records, prow.get("topic"), prow.get("topic_id"))
        topics.add_row("partitions", prow)

    def undecodable_frame(self, direction: int, ts: int, size: int, offset: int, reason: str) -> None:
        self.undecodable_frames += 1
        self.tables.undecodable_frames += 1
        self.tables.decode_errors[reason.split(":")[0]] += 1

    # -- helpers -------------------------------------------------------------------------------------
    def _write_records(self, req: Request, parts: Any) -> tuple[int, int]:
        """Write the records of a request's partitions now; returns (rows, bytes released)."""
        context = self._context(req)
        written = released = 0
        for part in parts:
            held = part.pop("_held", 0)
            self._release(held)
            released += held
            records = records_of(req.api_key, part, context)
            if records:
                written += len(records)
                self.tables.topics.add("records", records, part.get("topic"), part.get("topic_id"))
        return written, released

    def _release(self, held: int) -> None:
        budget = self.tables.budget
        if held and budget is not None:
            budget.release(RECORDS, held)

    def _context(self, req: Request) -> dict[str, Any]:
        return {
            "capture": self.tables.capture,
            "conn_id": self.conn_id,
            "correlation_id": req.correlation_id,
            "api_key": req.api_key,
            "api_name": api_name(req.api_key),
            "api_version": req.api_version,
        }

    def _broker(self) -> dict[str, Any]:
        """broker_ip, broker_port and, when already known, broker_id (else BrokerIds holds the rows)."""
        fields = self.broker_fields
        if self.broker is not None and fields["broker_id"] is None:
            # Rows that will be held take only a firm id (the broker's own word or --broker-map's);
            # `show` prints at once with whatever is known.
            node_ids = self.tables.node_ids
            directory = node_ids.directory
            node = directory.firm(self.broker) if node_ids.hold else directory.node(self.broker)
            if node is not None:
                fields = self.broker_fields = {**fields, "broker_id": node}
        return fields

    def _exchange(self, req: Request, resp: Response | None) -> dict[str, Any]:
        """The exchange's client and times (tables.schemas._CLIENT and _TIMES), as every row of it has them."""
        return {
            "client_id": req.client_id,
            "client_ip": self.client_ip,
            "ts_request": req.ts_last,
            "ts_response": resp.ts_first if resp is not None else None,
            "latency_ms": (resp.ts_first - req.ts_last) / 1000.0 if resp is not None else None,
        }

    def connection_fields(self) -> dict[str, Any]:
        return {
            "client_id": self.client_id,
            "client_software_name": self.client_software_name,
            "client_software_version": self.client_software_version,
            "unanswered": self.unanswered,
            "no_response_expected": self.no_response_expected,
            "decode_errors": self.decode_errors,
            "undecodable_frames": self.undecodable_frames,
        }
