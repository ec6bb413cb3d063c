"""The last line of `kwsniff capture`'s summary, alone and with --workers: the live capture tests
(tests/test_live_parts.py) check only that it is printed."""

from __future__ import annotations

import pytest

from kwsniff.capture.live import CaptureCounters
from kwsniff.view.summary import print_capture_line


def test_one_capture_names_its_drops_and_periods(capsys: pytest.CaptureFixture[str]) -> None:
    print_capture_line(CaptureCounters(12_345, 2_000_000, 3, 4, 5), 2)
    assert capsys.readouterr().out == (
        "  capture: 12,345 packets (2.0 MB); packets dropped before decoding (their bytes are among the gaps"
        " above): by the kernel 3, by the interface 4, by kwsniff's queue 5; 2 rotation periods\n"
    )


def test_workers_name_each_rings_kernel_drops(capsys: pytest.CaptureFixture[str]) -> None:
    workers = [CaptureCounters(kernel_drops=1_000), CaptureCounters(kernel_drops=2)]
    print_capture_line(CaptureCounters(10, 640, 1_002, 0, 7), 1, workers)
    assert capsys.readouterr().out == (
        "  capture: 10 packets (640 B) by 2 workers; packets dropped before decoding (their bytes are among"
        " the gaps above): by the kernel 1,002 (worker 0 1,000, worker 1 2), by the interface 0, by"
        " kwsniff's queues 7; 1 rotation periods\n"
    )
