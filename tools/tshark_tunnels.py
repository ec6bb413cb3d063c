"""Write tshark's view of the wrapped test captures (tests/tunnelwire.py) as tests/data/tunnels.tshark.json.

    python tools/tshark_tunnels.py

The wraps are deterministic, so tests/test_net_tunnels.py rebuilds the same files and compares kwsniff's
requests with tshark's, without needing tshark at test time. VXLAN on 8472 is decoded as such with
`-d udp.port==8472,vxlan` (tshark's default is 4789 only).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tools")]

import tunnelwire as tw  # noqa: E402
from tshark_expected import kafka_pdus, tshark_version  # noqa: E402

OUT = ROOT / "tests" / "data" / "tunnels.tshark.json"


def main() -> None:
    base = tw.inners(tw.resegment(ROOT / "tests" / "data" / "captures" / tw.BASE_CAPTURE))
    view: dict[str, object] = {"tshark_version": tshark_version(), "base": tw.BASE_CAPTURE, "requests": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (wrap, _, _) in [("plain", (lambda p, n: [p.original], "", {})), *tw.WRAPS.items()]:
            path = tw.write(Path(tmp) / f"{name}.pcap", tw.wrapped(base, wrap))
            requests, _ = kafka_pdus(path, tw.BROKER_PORT, extra=["-d", "udp.port==8472,vxlan"])
            view["requests"][name] = sorted(
                [r["api_key"], r["api_version"], r["correlation_id"]] for r in requests
            )  # type: ignore[index]
            print(f"{name}: {len(requests)} requests", file=sys.stderr)
    OUT.write_text(json.dumps(view, indent=None, separators=(",", ":")) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
