"""A PLAIN-speaking front for tansu, for the SASL tests: tansu 0.6 refuses the PLAIN mechanism
(it speaks SCRAM only), so this proxy answers SaslHandshake and SaslAuthenticate itself and forwards
every other request to a tansu that needs no authentication. Every answer it writes itself is
encoded by kio (an independent library generated from the Kafka specs), never by kwsniff.

    python tests/sasl_plain_proxy.py LISTEN_PORT BROKER_PORT USER PASSWORD [echo]

A PLAIN token (RFC 4616: authzid NUL authcid NUL passwd) naming USER with PASSWORD is accepted;
anything else gets SASL_AUTHENTICATION_FAILED. With `echo`, the refusal's error_message repeats the
password the client sent, as a careless broker or proxy might. Only SaslHandshake v1 (KIP-152) is answered: the
tokens then travel inside SaslAuthenticate, which real clients use against any broker that lists it.
"""

from __future__ import annotations

import asyncio
import datetime
import io
import struct
import sys
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeader1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeader2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeader0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeader1
from kio.schema.sasl_authenticate.v0 import request as auth_request0
from kio.schema.sasl_authenticate.v0 import response as auth_response0
from kio.schema.sasl_authenticate.v1 import request as auth_request1
from kio.schema.sasl_authenticate.v1 import response as auth_response1
from kio.schema.sasl_authenticate.v2 import request as auth_request2
from kio.schema.sasl_authenticate.v2 import response as auth_response2
from kio.schema.sasl_handshake.v1.response import SaslHandshakeResponse
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32

HOST = "127.0.0.1"
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
AUTHENTICATE = {
    0: (auth_request0.SaslAuthenticateRequest, auth_response0.SaslAuthenticateResponse),
    1: (auth_request1.SaslAuthenticateRequest, auth_response1.SaslAuthenticateResponse),
    2: (auth_request2.SaslAuthenticateRequest, auth_response2.SaslAuthenticateResponse),
}


def framed(header_type: Any, correlation: int, body_type: Any, body: Any) -> bytes:
    out = io.BytesIO()
    entity_writer(header_type)(out, header_type(correlation_id=i32(correlation)))
    entity_writer(body_type)(out, body)
    return struct.pack(">i", len(out.getvalue())) + out.getvalue()


def handshake(correlation: int) -> bytes:
    # SaslHandshake v1: request header v1, response header v0 (not flexible).
    answer = SaslHandshakeResponse(error_code=ErrorCode.none, mechanisms=("PLAIN",))
    return framed(ResponseHeader0, correlation, SaslHandshakeResponse, answer)


def authenticate(
    frame: bytes, version: int, correlation: int, user: bytes, password: bytes, echo: bool = False
) -> bytes:
    request_type, response_type = AUTHENTICATE[version]
    header_type = RequestHeader2 if version >= 2 else RequestHeader1
    _, offset = entity_reader(header_type)(frame, 0)
    request, _ = entity_reader(request_type)(frame, offset)
    sent = request.auth_bytes.split(b"\0")[1:]
    accepted = sent == [user, password]
    refusal = "Authentication failed: invalid credentials"
    if echo and len(sent) == 2:
        refusal += f" for {sent[0].decode(errors='replace')} with password {sent[1].decode(errors='replace')}"
    fields: dict[str, Any] = {
        "error_code": ErrorCode.none if accepted else ErrorCode.sasl_authentication_failed,
        "error_message": None if accepted else refusal,
        "auth_bytes": b"",
    }
    if version >= 1:
        fields["session_lifetime"] = datetime.timedelta(0)
    response_header = ResponseHeader1 if version >= 2 else ResponseHeader0
    return framed(response_header, correlation, response_type, response_type(**fields))


async def read_frame(reader: asyncio.StreamReader) -> bytes | None:
    try:
        size = struct.unpack(">i", await reader.readexactly(4))[0]
        return await reader.readexactly(size)
    except asyncio.IncompleteReadError:
        return None


async def main(listen: int, broker: int, user: bytes, password: bytes, echo: bool) -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        broker_reader, broker_writer = await asyncio.open_connection(HOST, broker)
        try:
            # One request at a time per connection keeps responses in request order.
            while (frame := await read_frame(reader)) is not None:
                key, version, correlation = struct.unpack(">hhi", frame[:8])
                if key == SASL_HANDSHAKE and version == 1:
                    writer.write(handshake(correlation))
                elif key == SASL_AUTHENTICATE and version in AUTHENTICATE:
                    writer.write(authenticate(frame, version, correlation, user, password, echo))
                else:
                    broker_writer.write(struct.pack(">i", len(frame)) + frame)
                    answer = await read_frame(broker_reader)
                    if answer is None:
                        break
                    writer.write(struct.pack(">i", len(answer)) + answer)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()
            broker_writer.close()

    server = await asyncio.start_server(serve, HOST, listen)
    print("listening", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    args = sys.argv[1:]
    asyncio.run(main(int(args[0]), int(args[1]), args[2].encode(), args[3].encode(), args[4:] == ["echo"]))
