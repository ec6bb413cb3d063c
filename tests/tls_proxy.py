"""A TLS-terminating proxy in front of a plaintext Kafka broker, for the TLS decryption tests: it
writes the NSS key log of every connection it accepts (``keylog_filename``), as a server-side
key log would be taken in production, and forwards the plaintext to the broker unchanged.

    python tests/tls_proxy.py LISTEN_PORT BROKER_PORT CERT KEY KEYLOG [--tls12]
"""

from __future__ import annotations

import asyncio
import ssl
import sys

HOST = "127.0.0.1"


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, ssl.SSLError):
        pass
    finally:
        writer.close()


async def main(listen: int, broker: int, cert: str, key: str, keylog: str, tls12: bool) -> None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    context.keylog_filename = keylog
    if tls12:
        context.maximum_version = ssl.TLSVersion.TLSv1_2

    async def accept(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        broker_reader, broker_writer = await asyncio.open_connection(HOST, broker)
        await asyncio.gather(pipe(client_reader, broker_writer), pipe(broker_reader, client_writer))

    server = await asyncio.start_server(accept, HOST, listen, ssl=context)
    print("listening", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    args = sys.argv[1:]
    asyncio.run(main(int(args[0]), int(args[1]), args[2], args[3], args[4], "--tls12" in args))
