"""NSS key log files (the SSLKEYLOGFILE format): one secret a line, keyed by the ClientHello's random.

    CLIENT_RANDOM <client random hex> <master secret hex>               TLS 1.2 and older
    CLIENT_HANDSHAKE_TRAFFIC_SECRET <client random hex> <secret hex>    TLS 1.3, and likewise
    SERVER_HANDSHAKE_TRAFFIC_SECRET, CLIENT_TRAFFIC_SECRET_0, SERVER_TRAFFIC_SECRET_0

Comments (#) and labels this module does not use are ignored. A key log is a secret: nothing here
ever prints, logs or returns it except to the decryptor. No I/O: text comes in through add_text,
and a live capture's follower (kwsniff.pipeline.keylogs) calls ``refresh`` to read what a client
appended since.

Secrets are held under a byte cap (the secrets share of ``--memory-limit``, docs/memory.md): past
it the oldest client randoms are evicted and counted, so neither a key log of millions of sessions
nor a capture of Decryption Secrets Blocks can take more than its share. A line longer than any
key log line is never buffered whole: it is dropped as it comes and counted as ignored.
"""

from __future__ import annotations

from collections.abc import Callable

from kwsniff.memory import SECRET_COST

LABELS = frozenset(
    {
        "CLIENT_RANDOM",
        "CLIENT_HANDSHAKE_TRAFFIC_SECRET",
        "SERVER_HANDSHAKE_TRAFFIC_SECRET",
        "CLIENT_TRAFFIC_SECRET_0",
        "SERVER_TRAFFIC_SECRET_0",
    }
)
# The longest line worth reading: a label, 64 hex digits of client random and a secret of up to 64
# bytes (SHA-512 would be 128 hex digits) take under 260 bytes; anything longer is not a key log line.
MAX_LINE = 1024
# Text is split into lines this much at a time, so that a block of newlines never becomes millions
# of line objects at once.
PIECE = 64 * 1024


class KeyLog:
    """The secrets of a key log (or several), by client random."""

    __slots__ = (
        "_secrets",
        "_partial",
        "_long",
        "_cell",
        "cap",
        "held",
        "lines",
        "ignored_lines",
        "evicted",
        "evicted_bytes",
        "refresh",
    )

    def __init__(self, text: str | bytes = "", cap: int | None = None) -> None:
        self._secrets: dict[bytes, dict[str, bytes]] = {}
        self._partial = b""
        self._long = False  # inside a line longer than MAX_LINE: dropped up to its newline
        self._cell: list[int] | None = None  # the budget's secrets pool, once a session binds it
        self.cap = cap  # most bytes of secrets held (None: no cap until bound)
        self.held = 0  # bytes the secrets held cost (SECRET_COST each, plus the secret's bytes)
        self.lines = 0  # secrets read
        self.ignored_lines = 0  # comments, other labels, malformed or over-long lines
        self.evicted = 0  # secrets evicted for the cap (oldest client randoms first)
        self.evicted_bytes = 0
        # Called before a lookup that found nothing (a live capture re-reads its key log files).
        self.refresh: Callable[[], None] | None = None
        if text:
            self.add_text(text)

    def __len__(self) -> int:
        return len(self._secrets)

    def __repr__(self) -> str:  # never the secrets themselves
        return f"KeyLog({len(self._secrets)} client randoms)"

    def __getstate__(self) -> dict:
        # Spark ships the key log to executors inside the session options; the follower stays home,
        # and so do the driver's counts of what it evicted (each task counts its own).
        return {
            "secrets": self._secrets,
            "lines": self.lines,
            "ignored": self.ignored_lines,
            "cap": self.cap,
            "held": self.held,
        }

    def __setstate__(self, state: dict) -> None:
        self._secrets = state["secrets"]
        self._partial = b""
        self._long = False
        self._cell = None
        self.cap = state["cap"]
        self.held = state["held"]
        self.lines = state["lines"]
        self.ignored_lines = state["ignored"]
        self.evicted = self.evicted_bytes = 0
        self.refresh = None

    def bound(self, cell: list[int] | None, cap: int) -> None:
        """Hold the secrets in a budget's pool (``cell``, kwsniff.memory) of ``cap`` bytes: what is
        held now is charged to it, and the oldest go while it is over. ``None`` lets go of the pool."""
        if self._cell is not None:
            self._cell[0] -= self.held
        self._cell = cell
        if cell is not None:
            cell[0] += self.held
        self.cap = cap
        self._evict()

    def take_evicted(self) -> tuple[int, int]:
        """(secrets, bytes) evicted since the last call: a session reports them once."""
        taken = self.evicted, self.evicted_bytes
        self.evicted = self.evicted_bytes = 0
        return taken

    def add_text(self, text: str | bytes) -> None:
        """Add key log text; a last line without its newline waits for the rest (a file being appended)."""
        data = text.encode("ascii", "replace") if isinstance(text, str) else text
        view = memoryview(data)
        for start in range(0, len(view), PIECE):
            self._add_piece(bytes(view[start : start + PIECE]))

    def _add_piece(self, data: bytes) -> None:
        lines = data.split(b"\n")
        rest = lines.pop()
        if lines:
            if self._long:
                self.ignored_lines += 1
                lines[0] = b""
            else:
                lines[0] = self._partial + lines[0]
            self._partial, self._long = b"", False
            for line in lines:
                self._line(line.strip())
        if self._long:
            return
        self._partial += rest
        if len(self._partial) > MAX_LINE:
            self._partial, self._long = b"", True

    def end(self) -> None:
        """No more text will come: a last line without a newline counts too."""
        if self._long:
            self.ignored_lines += 1
            self._long = False
        elif self._partial:
            self._line(self._partial.strip())
        self._partial = b""

    def _line(self, line: bytes) -> None:
        if not line or line.startswith(b"#"):
            return
        if len(line) > MAX_LINE:
            self.ignored_lines += 1
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
        found = self._secrets.setdefault(random, {})
        label = parts[0].decode("ascii")
        old = found.get(label)
        cost = len(secret) - (len(old) if old is not None else -SECRET_COST)
        found[label] = secret
        self.held += cost
        if self._cell is not None:
            self._cell[0] += cost
        self.lines += 1
        if self.cap is not None and self.held > self.cap:
            self._evict()

    def _evict(self) -> None:
        """The oldest client randoms go until the secrets fit their cap (Suricata's memcap rule)."""
        if self.cap is None:
            return
        while self.held > self.cap and self._secrets:
            random = next(iter(self._secrets))
            gone = self._secrets.pop(random)
            cost = sum(SECRET_COST + len(s) for s in gone.values())
            self.held -= cost
            if self._cell is not None:
                self._cell[0] -= cost
            self.evicted += len(gone)
            self.evicted_bytes += cost

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
