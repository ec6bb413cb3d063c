"""Other protocols' exchanges, laid out byte by byte from their specifications, for the corpus of
traffic that must never be taken for Kafka (tests/test_other_protocol_corpus.py).

Each builder returns (port, messages): the port the protocol is registered on and the messages of one
real-looking session in order, as (direction, bytes) with direction 0 client to server, 1 server to
client. Several of them open with bytes that read as a plausible Kafka request header (a size under
100 MiB, a known api key and version): FastCGI, SMPP, Gearman, HART-IP, OpenFlow, SOCKS.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

Messages = list[tuple[int, bytes]]


def _u16(v: int) -> bytes:
    return struct.pack(">H", v)


def _u32(v: int) -> bytes:
    return struct.pack(">I", v)


# -- Elasticsearch transport (9300): "ES", int32 length, int64 request id, status, int32 version ----
def _es_message(request_id: int, status: int, body: bytes) -> bytes:
    variable_header = b"\x00" + b"\x00"  # no thread-context request or response headers
    rest = struct.pack(">qbi", request_id, status, 8_500_099) + _u32(len(variable_header)) + variable_header
    return b"ES" + _u32(len(rest) + len(body)) + rest + body


def elasticsearch_transport() -> tuple[int, Messages]:
    handshake = b"\x16internal:tcp/handshake" + b"\x00" + _u32(8_500_099)
    ping = b"ES\xff\xff\xff\xff"  # keep-alive ping (length -1)
    return 9300, [
        (0, _es_message(1, 0b1000, handshake)),  # bit 3: handshake
        (1, _es_message(1, 0b1001, _u32(8_500_099))),  # bit 0: response
        (0, ping),
        (0, _es_message(2, 0, b"\x1acluster:monitor/nodes/info" + b"\x00" * 6)),
        (1, _es_message(2, 1, b"\x0bdocker-node" + b"\x00" * 40)),
    ]


# -- FastCGI (9000): version 1, type, request id, content length, padding ---------------------------
def _fcgi(record_type: int, request_id: int, content: bytes) -> bytes:
    padding = -len(content) % 8
    head = struct.pack(">BBHHBB", 1, record_type, request_id, len(content), padding, 0)
    return head + content + b"\x00" * padding


def _fcgi_pairs(pairs: dict[str, str]) -> bytes:
    return b"".join(bytes([len(k), len(v)]) + k.encode() + v.encode() for k, v in pairs.items())


def fastcgi() -> tuple[int, Messages]:
    begin = _fcgi(1, 1, struct.pack(">HB5x", 1, 0))  # BEGIN_REQUEST, role RESPONDER
    params = _fcgi(4, 1, _fcgi_pairs({"SCRIPT_FILENAME": "/var/www/index.php", "REQUEST_METHOD": "GET"}))
    request = begin + params + _fcgi(4, 1, b"") + _fcgi(5, 1, b"")  # PARAMS end, empty STDIN
    stdout = _fcgi(6, 1, b"Content-type: text/html\r\n\r\n<h1>hello</h1>") + _fcgi(6, 1, b"")
    end = _fcgi(3, 1, struct.pack(">IB3x", 0, 0))  # END_REQUEST, REQUEST_COMPLETE
    return 9000, [(0, request), (1, stdout + end)]


# -- SMPP 3.4 (9000 here): command_length, command_id, command_status, sequence_number, body ----------
def _smpp(command_id: int, status: int, sequence: int, body: bytes) -> bytes:
    return struct.pack(">IIII", 16 + len(body), command_id, status, sequence) + body


def smpp() -> tuple[int, Messages]:
    bind = b"smppclient1\x00password\x00\x00" + bytes([0x34, 0, 0]) + b"\x00"
    submit = (
        b"\x00" + bytes([1, 1]) + b"447700900123\x00" + bytes([1, 1]) + b"447700900456\x00"
        + bytes([0, 0, 0]) + b"\x00\x00" + bytes([1, 0, 0, 0]) + bytes([11]) + b"hello world"
    )  # fmt: skip
    return 9000, [
        (0, _smpp(0x00000002, 0, 1, bind)),  # bind_transmitter
        (1, _smpp(0x80000002, 0, 1, b"SMSC\x00")),
        (0, _smpp(0x00000004, 0, 2, submit)),  # submit_sm
        (1, _smpp(0x80000004, 0, 2, b"9a8b7c\x00")),
        (0, _smpp(0x00000015, 0, 3, b"")),  # enquire_link
        (1, _smpp(0x80000015, 0, 3, b"")),
        (0, _smpp(0x00000006, 0, 4, b"")),  # unbind
        (1, _smpp(0x80000006, 0, 4, b"")),
    ]


# -- Omron FINS/TCP (9600): "FINS", length, command, error code, then FINS frames -------------------
def _fins_tcp(command: int, data: bytes) -> bytes:
    return b"FINS" + _u32(8 + len(data)) + _u32(command) + _u32(0) + data


def omron_fins() -> tuple[int, Messages]:
    memory_read = bytes([0x80, 0, 2, 0, 1, 0, 0, 0xEF, 0, 0x12]) + b"\x01\x01" + b"\x82\x00\x64\x00\x00\x0a"
    return 9600, [
        (0, _fins_tcp(0, _u32(0))),  # node address data send (client), auto-assign
        (1, _fins_tcp(1, _u32(0xEF) + _u32(1))),
        (0, _fins_tcp(2, memory_read)),
        (1, _fins_tcp(2, bytes([0xC0, 0, 2, 0, 0xEF, 0, 0, 1, 0, 0x12]) + b"\x01\x01\x00\x00" + b"\x00\x2a" * 10)),
    ]  # fmt: skip


# -- Gearman (4730): "\0REQ"/"\0RES", type, data size, NUL-separated arguments ------------------------
def _gearman(magic: bytes, packet_type: int, *args: bytes) -> bytes:
    data = b"\x00".join(args)
    return magic + struct.pack(">II", packet_type, len(data)) + data


def gearman() -> tuple[int, Messages]:
    return 4730, [
        (0, _gearman(b"\x00REQ", 7, b"reverse", b"", b"Hello World!")),  # SUBMIT_JOB
        (1, _gearman(b"\x00RES", 8, b"H:lap:1")),  # JOB_CREATED
        (1, _gearman(b"\x00RES", 13, b"H:lap:1", b"!dlroW olleH")),  # WORK_COMPLETE
        (0, _gearman(b"\x00REQ", 16, b"ping")),  # ECHO_REQ
        (1, _gearman(b"\x00RES", 17, b"ping")),  # ECHO_RES
    ]


# -- HART-IP (5094): version, message type, message id, status, sequence, byte count ------------------
def _hart_ip(message_type: int, message_id: int, sequence: int, body: bytes) -> bytes:
    return struct.pack(">BBBBHH", 1, message_type, message_id, 0, sequence, 8 + len(body)) + body


def hart_ip() -> tuple[int, Messages]:
    command_0 = bytes([0x82, 0x26, 0x4E, 0x00, 0x00, 0x01, 0x00, 0x00, 0xA9])  # long frame, command 0
    return 5094, [
        (0, _hart_ip(0, 0, 1, struct.pack(">BI", 1, 30_000))),  # session initiate, primary master
        (1, _hart_ip(1, 0, 1, struct.pack(">BI", 1, 30_000))),
        (0, _hart_ip(0, 3, 2, command_0)),  # token-passing PDU
        (1, _hart_ip(1, 3, 2, bytes([0x86, 0x26, 0x4E, 0, 0, 1, 0, 14, 0, 0, 0xFE, 0x26, 0x4E, 5, 7, 1]))),
        (0, _hart_ip(0, 1, 3, b"")),  # session close
        (1, _hart_ip(1, 1, 3, b"")),
    ]


# -- HiSLIP (4880): "HS", message type, control code, parameter, int64 payload length ---------------
def _hislip(message_type: int, control: int, parameter: int, payload: bytes) -> bytes:
    return b"HS" + struct.pack(">BBIQ", message_type, control, parameter, len(payload)) + payload


def hislip() -> tuple[int, Messages]:
    return 4880, [
        (0, _hislip(0, 0, (0x0100 << 16) | 0x5853, b"hislip0")),  # Initialize: version 1.0, vendor "XS"
        (1, _hislip(1, 0, (0x0100 << 16) | 1, b"")),  # InitializeResponse: session id 1
        (0, _hislip(7, 0, 0xFFFFFF00, b"*IDN?\n")),  # DataEnd, message id
        (1, _hislip(7, 0, 0xFFFFFF00, b"Keysight,34465A,MY1234,A.03\n")),
    ]


# -- OpenFlow 1.3 (6653): version, type, length, xid ---------------------------------------------
def _openflow(message_type: int, xid: int, body: bytes) -> bytes:
    return struct.pack(">BBHI", 4, message_type, 8 + len(body), xid) + body


def openflow() -> tuple[int, Messages]:
    hello = _openflow(0, 1, struct.pack(">HHI", 1, 8, 1 << 4))  # version bitmap: 1.3
    features = struct.pack(">QIBB2xII", 0x0000_0A0B_0C0D_0E0F, 256, 254, 0, 0x4F, 0)
    return 6653, [
        (0, hello),  # switch to controller
        (1, hello),
        (1, _openflow(5, 2, b"")),  # FEATURES_REQUEST
        (0, _openflow(6, 2, features)),  # FEATURES_REPLY
        (1, _openflow(2, 3, b"ping")),  # ECHO_REQUEST
        (0, _openflow(3, 3, b"ping")),  # ECHO_REPLY
    ]


# -- Raft over hashicorp/raft's net transport (9001/9002): rpc type byte, then msgpack -------------
def _msgpack(value: object) -> bytes:
    if isinstance(value, bool):
        return b"\xc3" if value else b"\xc2"
    if isinstance(value, int):
        return bytes([value]) if 0 <= value < 128 else b"\xcf" + struct.pack(">Q", value)
    if isinstance(value, bytes):
        return b"\xc4" + bytes([len(value)]) + value
    if isinstance(value, str):
        return bytes([0xA0 | len(value)]) + value.encode()
    if isinstance(value, dict):
        return bytes([0x80 | len(value)]) + b"".join(_msgpack(k) + _msgpack(v) for k, v in value.items())
    raise TypeError(value)


def raft(port: int = 9001) -> Callable[[], tuple[int, Messages]]:
    def build() -> tuple[int, Messages]:
        header = {"ProtocolVersion": 3, "ID": b"node-2", "Addr": b"10.0.0.2:9002"}
        vote = {"RPCHeader": header, "Term": 7, "LastLogIndex": 1042, "LastLogTerm": 6}
        granted = {"RPCHeader": header, "Term": 7, "Granted": True}
        append = {
            "RPCHeader": header,
            "Term": 7,
            "PrevLogEntry": 1042,
            "PrevLogTerm": 6,
            "LeaderCommitIndex": 1040,
        }
        appended = {"RPCHeader": header, "Term": 7, "LastLog": 1042, "Success": True}
        no_error = _msgpack("")
        return port, [
            (0, b"\x01" + _msgpack(vote)),  # RequestVote
            (1, no_error + _msgpack(granted)),
            (0, b"\x00" + _msgpack(append)),  # AppendEntries (heartbeat)
            (1, no_error + _msgpack(appended)),
            (0, b"\x00" + _msgpack(append)),
            (1, no_error + _msgpack(appended)),
        ]  # fmt: skip

    return build


# -- SOCKS5 (1080, RFC 1928) carrying an HTTP request ----------------------------------------------
def socks5() -> tuple[int, Messages]:
    host = b"example.org"
    return 1080, [
        (0, b"\x05\x01\x00"),  # version 5, one method: no authentication
        (1, b"\x05\x00"),
        (0, b"\x05\x01\x00\x03" + bytes([len(host)]) + host + _u16(80)),  # CONNECT domain:80
        (1, b"\x05\x00\x00\x01" + bytes([93, 184, 216, 34]) + _u16(80)),
        (0, b"GET / HTTP/1.1\r\nHost: example.org\r\n\r\n"),
        (1, b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"),
    ]


def socks4() -> tuple[int, Messages]:
    return 1080, [
        (0, b"\x04\x01" + _u16(6667) + bytes([10, 0, 0, 9]) + b"alice\x00"),  # CONNECT
        (1, b"\x00\x5a" + _u16(6667) + bytes([10, 0, 0, 9])),  # granted
        (0, b"NICK alice\r\nUSER alice 0 * :Alice\r\n"),
        (1, b":irc.local 001 alice :Welcome\r\n"),
    ]


# -- TeamViewer (5938): magic 0x1724, command, little-endian length --------------------------------
def _teamviewer(command: int, payload: bytes) -> bytes:
    return b"\x17\x24" + bytes([command]) + struct.pack("<H", len(payload)) + payload


def teamviewer() -> tuple[int, Messages]:
    return 5938, [
        (0, _teamviewer(0x10, b"\x01\x00\x00\x00" + b"\x9a\x02\x00\x00" * 4)),  # CMD_IDENTIFY
        (1, _teamviewer(0x11, b"\x01\x00\x00\x00")),
        (0, _teamviewer(0x1E, b"\x00" * 12)),  # keep-alive
        (1, _teamviewer(0x1E, b"\x00" * 12)),
    ]


# -- A game protocol (24120): Minecraft-style VarInt-length-prefixed packets -----------------------
def _varint(v: int) -> bytes:
    out = bytearray()
    while True:
        byte, v = v & 0x7F, v >> 7
        out.append(byte | (0x80 if v else 0))
        if not v:
            return bytes(out)


def _game_packet(packet_id: int, data: bytes) -> bytes:
    body = _varint(packet_id) + data
    return _varint(len(body)) + body


def game_24120() -> tuple[int, Messages]:
    address = b"play.example.net"
    handshake = _game_packet(0, _varint(767) + _varint(len(address)) + address + _u16(24120) + _varint(1))
    status = b'{"version":{"name":"1.21","protocol":767},"players":{"max":20,"online":3}}'
    return 24120, [
        (0, handshake + _game_packet(0, b"")),  # handshake, status request
        (1, _game_packet(0, _varint(len(status)) + status)),
        (0, _game_packet(1, struct.pack(">q", 1_700_000_000_123))),  # ping
        (1, _game_packet(1, struct.pack(">q", 1_700_000_000_123))),  # pong
    ]


# -- PostgreSQL (5432): startup message (int32 length, protocol 3.0) reads as a Metadata v0 header ---
def postgres_startup() -> tuple[int, Messages]:
    params = b"user\x00app\x00database\x00orders\x00application_name\x00psql\x00\x00"
    startup = _u32(8 + len(params)) + _u32(3 << 16) + params
    auth_ok = b"R" + _u32(8) + _u32(0)
    ready = b"Z" + _u32(5) + b"I"
    query = b"SELECT 1;\x00"
    return 5432, [
        (0, startup),
        (1, auth_ok + b"S" + _u32(25) + b"server_version\x0015.8\x00" + ready),
        (0, b"Q" + _u32(4 + len(query)) + query),
        (1, b"T" + _u32(33) + _u16(1) + b"?column?\x00" + b"\x00" * 18 + b"D" + _u32(11) + _u16(1) + _u32(1) + b"1" + ready),
    ]  # fmt: skip


BUILDERS: dict[str, Callable[[], tuple[int, Messages]]] = {
    "elasticsearch_transport": elasticsearch_transport,
    "fastcgi": fastcgi,
    "smpp": smpp,
    "omron_fins": omron_fins,
    "gearman": gearman,
    "hart_ip": hart_ip,
    "hislip": hislip,
    "openflow": openflow,
    "raft_9001": raft(9001),
    "raft_9002": raft(9002),
    "socks5": socks5,
    "socks4": socks4,
    "teamviewer": teamviewer,
    "game_24120": game_24120,
    "postgres_startup": postgres_startup,
}
