"""`capture --retain` with `--write-pcap` (kwsniff.capture.pcap_periods.expire_periods): the period
pcaps whose packets all lie before the retention are deleted, a file ending where the next begins, the
latest kept; other files beside them are not touched."""

from __future__ import annotations

from pathlib import Path

from kwsniff.capture.pcap_periods import expire_periods, period_path

DAY = 86_400.0


def test_period_pcaps_past_the_retention_are_deleted_and_the_rest_kept(tmp_path: Path) -> None:
    target = tmp_path / "ring.pcap"
    now = 1_800_000_000.0  # 2027-01-15T08:00:00Z
    # Periods of an hour from ten days back; a period's packets end where the next begins.
    starts = [now - 10 * DAY + h * 3600 for h in range(0, 10 * 24, 6)]
    files = [period_path(target, i, s) for i, s in enumerate(starts, 1)]
    for f in files:
        f.write_bytes(b"pcap")
    other = tmp_path / "ring_notes.txt"
    other.write_text("kept")
    (tmp_path / "ring.pcap").write_bytes(b"a single-file capture is not a period")
    gone = expire_periods(target, 7 * DAY, now)
    cutoff = now - 7 * DAY
    expected = [f for f, nxt in zip(files, starts[1:], strict=False) if nxt <= cutoff]
    assert gone == expected
    assert len(expected) == 12  # 3 days of 6-hour periods: the one crossing the cutoff stays
    assert sorted(tmp_path.iterdir()) == sorted([*files[len(expected) :], other, tmp_path / "ring.pcap"])
    assert expire_periods(target, 7 * DAY, now) == []
    # Everything but the latest goes when the retention is shorter than a period.
    assert expire_periods(target, 0, now + DAY) == files[len(expected) : -1]
    assert [p for p in tmp_path.iterdir() if p.name.startswith("ring_0")] == [files[-1]]
