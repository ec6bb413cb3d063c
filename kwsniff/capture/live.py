"""Live capture with pcapy-ng (libpcap, kernel BPF, TPACKET_V3 ring): packets of an interface, in batches,
handed to the decode thread through a bounded queue.

The queue is bounded in bytes (the memory budget's queue share, kwsniff.memory), not in batches: a
batch of 1,024 packets may be 64 bytes or 256 MiB.

The capture thread only reads: the handle is non-blocking and the thread waits in ``select`` on its
descriptor for at most POLL_S, so a stop request is seen within that time and the thread never holds
the GIL while waiting (a blocked libpcap read would also keep Ctrl-C from being handled). When the
decode thread falls behind and the queue is full, the batch is dropped and counted: the kernel ring
is never left to overflow silently because Python is busy.
"""

from __future__ import annotations

import os
import queue
import select
import threading
import time
from collections import deque
from dataclasses import dataclass
from struct import Struct
from typing import Any

from kwsniff.capture.fanout import PACKET_FANOUT, SOL_PACKET, fanout_option, set_steering

POLL_S = 0.1  # longest wait before the capture thread checks for a stop request
TIMEOUT_MS = 100  # libpcap's packet-buffer timeout: a TPACKET_V3 block is handed over at least this often
BATCH = 1024  # packets per next_batch call
# A stop at a time (:meth:`LiveCapture.stop_at`): the ring is read until a packet at or after it, or
# until it has been quiet this long after it (libpcap hands a TPACKET_V3 block over within
# TIMEOUT_MS), but no longer than STOP_AT_LIMIT_S.
STOP_AT_QUIET_S = 0.5
STOP_AT_LIMIT_S = 10.0
QUEUE_BATCHES = 512  # batches the decode thread may fall behind before batches are dropped
QUEUE_BYTES = 128 * 1024 * 1024  # packet bytes it may fall behind (the default budget's queue share)
_META = Struct("=IIII")  # next_batch's per-packet record: sec, usec, offset, caplen

# (linktype, [(ts_us, data), ...]); None ends the stream.
Batch = tuple[int, list[tuple[int, bytes]]]


class ByteQueue:
    """A FIFO between two threads, bounded by the bytes of what it holds as well as by its length.

    ``put_nowait(item, nbytes)`` refuses (queue.Full) an item that would take it past either bound,
    so the producer can count the drop; ``put`` always takes an item of 0 bytes (the end marker).
    ``held`` is the bytes held now; ``peak`` the most it ever held."""

    def __init__(self, max_bytes: int, max_items: int = QUEUE_BATCHES) -> None:
        self.max_bytes = max_bytes
        self.max_items = max_items
        self.held = 0
        self.peak = 0
        self._items: deque[tuple[Any, int]] = deque()
        self._ready = threading.Condition(threading.Lock())

    def put_nowait(self, item: Any, nbytes: int = 0) -> None:
        with self._ready:
            if nbytes + self.held > self.max_bytes or len(self._items) >= self.max_items:
                raise queue.Full
            self._add(item, nbytes)

    def put(self, item: Any, nbytes: int = 0) -> None:
        with self._ready:
            self._add(item, nbytes)

    def _add(self, item: Any, nbytes: int) -> None:
        self._items.append((item, nbytes))
        self.held += nbytes
        self.peak = max(self.peak, self.held)
        self._ready.notify()

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        with self._ready:
            if not self._ready.wait_for(lambda: self._items, timeout if block else 0):
                raise queue.Empty
            item, nbytes = self._items.popleft()
            self.held -= nbytes
            return item

    def qsize(self) -> int:
        return len(self._items)


class LiveCaptureError(Exception):
    """The interface cannot be captured on (missing, no permission, bad filter); str() is one line."""


@dataclass
class CaptureCounters:
    captured: int = 0  # packets handed to the queue
    captured_bytes: int = 0
    kernel_drops: int = 0  # libpcap ps_drop: dropped by the kernel (ring full)
    if_drops: int = 0  # libpcap ps_ifdrop: dropped by the interface or driver
    queue_drops: int = 0  # read from the kernel but dropped because the decoder fell behind
    queued_batches: int = 0  # batches waiting in the queue for the decoder now: a level, not a count


def _interfaces() -> list[str]:
    import pcapy

    try:
        return list(pcapy.findalldevs())
    except pcapy.PcapError:
        return []


def open_interface(iface: str, bpf: str, snaplen: int, buffer_bytes: int) -> Any:
    """An activated, filtered, non-blocking pcapy handle on ``iface``; LiveCaptureError otherwise.

    Everything that can fail for the user (missing interface, permission, filter syntax) fails here,
    before any thread starts."""
    import pcapy

    if not os.path.exists(f"/sys/class/net/{iface}") and iface not in _interfaces():
        raise LiveCaptureError(f"{iface}: no such interface")
    try:
        handle = pcapy.create(iface)
        handle.set_snaplen(snaplen)
        handle.set_promisc(False)
        handle.set_timeout(TIMEOUT_MS)
        handle.set_buffer_size(buffer_bytes)
        # pcapy-ng returns pcap_activate's status rather than raising: negative is an error.
        status = handle.activate()
    except pcapy.PcapError as err:
        raise LiveCaptureError(f"{iface}: cannot capture ({err})") from None
    if isinstance(status, int) and status < 0:
        handle.close()
        raise LiveCaptureError(_activate_error(iface, status))
    try:
        handle.setfilter(bpf)
    except pcapy.PcapError as err:
        handle.close()
        raise LiveCaptureError(f"bad capture filter {bpf!r}: {err}") from None
    handle.setnonblock(True)
    return handle


def join_fanout(handle: Any, group: int, workers: int) -> None:
    """Join the packet socket under ``handle`` (libpcap's, already bound to its interface) to
    fanout group ``group`` of its network namespace, steered flow by flow (kwsniff.capture.fanout):
    from now on each packet goes to one member only. LiveCaptureError if the kernel refuses (a group
    of another type, or no fanout)."""
    import socket

    fd = os.dup(handle.getfd())  # the socket object owns (and closes) the duplicate only
    sock = socket.socket(fileno=fd)
    try:
        sock.setsockopt(SOL_PACKET, PACKET_FANOUT, fanout_option(group))
        # Set at once: until a program is set the group sends every packet to its first member,
        # and the workers drop what they hold from before all of them joined.
        set_steering(sock, workers)
    except OSError as err:
        raise LiveCaptureError(f"cannot join packet fanout group {group}: {err.strerror or err}") from None
    finally:
        sock.close()


PCAP_ERROR_NO_SUCH_DEVICE = -5
PCAP_ERROR_PERM_DENIED = -8
PCAP_ERROR_IFACE_NOT_UP = -9


def _activate_error(iface: str, status: int) -> str:
    if status == PCAP_ERROR_PERM_DENIED:
        return (
            f"{iface}: permission denied (run as root, or give the python binary "
            "CAP_NET_RAW and CAP_NET_ADMIN with setcap)"
        )
    if status == PCAP_ERROR_NO_SUCH_DEVICE:
        return f"{iface}: no such interface"
    if status == PCAP_ERROR_IFACE_NOT_UP:
        return f"{iface}: interface is down"
    return f"{iface}: cannot capture (libpcap error {status})"


def _pieces(
    packets: list[tuple[int, bytes]], nbytes: int, limit: int
) -> list[tuple[list[tuple[int, bytes]], int]]:
    """A batch as it goes into the queue: whole, or in pieces of at most ``limit`` bytes when it is
    larger than the whole queue may hold (a packet larger than that on its own is still one piece,
    and is dropped by the queue)."""
    if nbytes <= limit:
        return [(packets, nbytes)]
    pieces: list[tuple[list[tuple[int, bytes]], int]] = []
    part: list[tuple[int, bytes]] = []
    size = 0
    for packet in packets:
        n = len(packet[1])
        if part and size + n > limit:
            pieces.append((part, size))
            part, size = [], 0
        part.append(packet)
        size += n
    if part:
        pieces.append((part, size))
    return pieces


class LiveCapture:
    """Reads ``handle`` in a thread of its own into ``self.queue`` until :meth:`stop`, or ``count``
    packets. The queue ends with ``None`` once the thread is done."""

    def __init__(
        self,
        handle: Any,
        count: int = 0,
        queue_batches: int = QUEUE_BATCHES,
        queue_bytes: int = QUEUE_BYTES,
        close_on_stop: bool = True,
        skip_before: float = 0.0,
    ) -> None:
        self.handle = handle
        # Packets stamped before this (wall clock seconds) are skipped, not counted: a fanout
        # worker's from before it joined its group, or before the capture started.
        self._skip_us = int(skip_before * 1_000_000)
        # False (a fanout worker): the handle, a member of the group, stays open after the thread
        # stops until :meth:`close`, so its share is not handed to the other members meanwhile.
        self.close_on_stop = close_on_stop
        self._until_us: int | None = None  # stop_at's time
        self.linktype = int(handle.datalink())
        self.count = count
        self.queue = ByteQueue(queue_bytes, queue_batches)
        self.counters = CaptureCounters()
        self.stopping = threading.Event()
        self.error: str | None = None
        self._thread = threading.Thread(target=self._run, name="kwsniff-capture", daemon=True)
        self._lock = threading.Lock()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.stopping.set()

    def stop_at(self, seconds: float) -> None:
        """Stop once every packet the ring holds from before ``seconds`` (wall clock, the packets'
        own time) is read; later ones are left unread."""
        self._until_us = int(seconds * 1_000_000)
        self.stopping.set()

    def close(self) -> None:
        """Close the handle (leave the fanout group) once the thread is done; idempotent."""
        if not self.close_on_stop:
            self.close_on_stop = True
            self.handle.close()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def snapshot(self) -> CaptureCounters:
        """The counters now (kernel drops read from libpcap), safe from any thread."""
        with self._lock:
            c = self.counters
            return CaptureCounters(
                c.captured, c.captured_bytes, c.kernel_drops, c.if_drops, c.queue_drops, self.queue.qsize()
            )

    def _run(self) -> None:
        handle = self.handle
        fd = handle.getfd()
        counters = self.counters
        linktype = self.linktype
        unpack = _META.unpack_from
        until: int | None = None
        limit = 0.0
        skip = self._skip_us  # 0: none
        try:
            while True:
                if self.stopping.is_set():
                    if self._until_us is None:
                        break
                    if until is None:
                        until = self._until_us
                        limit = time.monotonic() + STOP_AT_LIMIT_S
                    if time.monotonic() > limit:
                        break
                if not select.select([fd], [], [], POLL_S)[0]:
                    self._read_stats()
                    if until is not None and time.time() * 1_000_000 >= until + STOP_AT_QUIET_S * 1_000_000:
                        break  # the ring holds nothing from before the stop
                    continue
                data, meta = handle.next_batch(BATCH)
                if not meta:
                    continue
                packets = []
                nbytes = 0
                reached = False
                for i in range(0, len(meta), _META.size):
                    sec, usec, off, caplen = unpack(meta, i)
                    ts = sec * 1_000_000 + usec
                    if ts < skip:
                        continue
                    if until is not None and ts >= until:
                        reached = True  # the ring is in time order: what follows is later still
                        break
                    packets.append((ts, data[off : off + caplen]))
                    nbytes += caplen
                if self.count:
                    packets = packets[: self.count - counters.captured]
                    nbytes = sum(len(p) for _, p in packets)
                for part, part_bytes in _pieces(packets, nbytes, self.queue.max_bytes):
                    try:
                        self.queue.put_nowait((linktype, part), part_bytes)
                        with self._lock:
                            counters.captured += len(part)
                            counters.captured_bytes += part_bytes
                    except queue.Full:
                        with self._lock:
                            counters.queue_drops += len(part)
                self._read_stats()
                if self.count and counters.captured >= self.count or reached:
                    break
        except Exception as err:  # noqa: BLE001 - reported by the command, never a silent stop
            self.error = f"capture stopped: {err}"
        finally:
            self._read_stats()
            if self.close_on_stop:
                handle.close()
            self.queue.put(None)

    def _read_stats(self) -> None:
        try:
            _recv, drop, ifdrop = self.handle.stats()
        except Exception:  # noqa: BLE001 - a handle that cannot report keeps its last figures
            return
        with self._lock:
            self.counters.kernel_drops = drop
            self.counters.if_drops = ifdrop
