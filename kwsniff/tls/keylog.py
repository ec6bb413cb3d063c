"""NSS key log files (the SSLKEYLOGFILE format): one secret a line, keyed by the ClientHello's random.

    CLIENT_RANDOM <client random hex> <master secret hex>               TLS 1.2 and older
    CLIENT_HANDSHAKE_TRAFFIC_SECRET <client random hex> <secret hex>    TLS 1.3, and likewise
    SERVER_HANDSHAKE_TRAFFIC_SECRET, CLIENT_TRAFFIC_SECRET_0, SERVER_TRAFFIC_SECRET_0

Comments (#) and labels this module does not use are ignored. A key log is a secret: nothing here
ever prints, logs or returns it except to the decryptor. No I/O: text comes in through add_text,
and a live capture's follower (kwsniff.capture.keylog_file) calls ``refresh`` to read what a
client appended since.
"""

from __future__ import annotations

from collections.abc import Callable

LABELS = frozenset(
    {
        "CLIENT_RANDOM",
        "CLIENT_HANDSHAKE_TRAFFIC_SECRET",
        "SERVER_HANDSHAKE_TRAFFIC_SECRET",
        "CLIENT_TRAFFIC_SECRET_0",
        "SERVER_TRAFFIC_SECRET_0",
    }
)


class KeyLog:
    """The secrets of a key log (or several), by client random."""

    __slots__ = ("_secrets", "_partial", "lines", "ignored_lines", "refresh")

    def __init__(self, text: str | bytes = "") -> None:
        self._secrets: dict[bytes, dict[str, bytes]] = {}
        self._partial = b""
        self.lines = 0  # secrets read
        self.ignored_lines = 0  # comments, other labels, malformed lines
        # Called before a lookup that found nothing (a live capture re-reads its key log files).
        self.refresh: Callable[[], None] | None = None
        if text:
            self.add_text(text)

    def __len__(self) -> int:
        return len(self._secrets)

    def __repr__(self) -> str:  # never the secrets themselves
        return f"KeyLog({len(self._secrets)} client randoms)"

    def __getstate__(self) -> dict:
        # Spark ships the key log to executors inside the session options; the follower stays home.
        return {"secrets": self._secrets, "lines": self.lines, "ignored": self.ignored_lines}

    def __setstate__(self, state: dict) -> None:
        self._secrets = state["secrets"]
        self._partial = b""
        self.lines = state["lines"]
        self.ignored_lines = state["ignored"]
        self.refresh = None

    def add_text(self, text: str | bytes) -> None:
        """Add key log text; a last line without its newline waits for the rest (a file being appended)."""
        data = self._partial + (text.encode("ascii", "replace") if isinstance(text, str) else bytes(text))
        lines = data.split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            self._line(line.strip())

    def end(self) -> None:
        """No more text will come: a last line without a newline counts too."""
        if self._partial:
            self._line(self._partial.strip())
            self._partial = b""

    def _line(self, line: bytes) -> None:
        if not line or line.startswith(b"#"):
            return
        parts = line.split()
        if len(parts) != 3 or parts[0].decode("ascii", "replace") not in LABELS:
            self.ignored_lines += 1
            return
        try:
            random, secret = bytes.fromhex(parts[1].decode("ascii")), bytes.fromhex(parts[2].decode("ascii"))
        except ValueError:
            self.ignored_lines += 1
            return
        if len(random) != 32 or not secret:
            self.ignored_lines += 1
            return
        self._secrets.setdefault(random, {})[parts[0].decode("ascii")] = secret
        self.lines += 1

    def secrets(self, client_random: bytes, labels: tuple[str, ...]) -> tuple[bytes, ...] | None:
        """The secrets under ``labels`` for one connection, or None while any of them is missing."""
        found = self._secrets.get(client_random)
        if found is None or any(label not in found for label in labels):
            if self.refresh is None:
                return None
            self.refresh()
            found = self._secrets.get(client_random)
            if found is None or any(label not in found for label in labels):
                return None
        return tuple(found[label] for label in labels)
