"""One atheris fuzz target: ``python fuzz/target.py NAME [libFuzzer options] [corpus dirs]``.

NAME is one of fuzz/targets.py's TARGETS. fuzz/run.py runs them all for a bounded time.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import atheris

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # the targets, and kwsniff from this checkout

with atheris.instrument_imports(include=["kwsniff", "targets", "segments", "int64_wire"]):
    import targets

    from kwsniff.protocol import decode as protocol_decode


def _instrumented_compile(compile_message: Any) -> Any:
    """Decoders are compiled from the schema at run time, after import: instrument them as they appear."""

    def compile_and_instrument(*args: Any, **kwargs: Any) -> Any:
        decode = compile_message(*args, **kwargs)
        for value in list(decode.__globals__.values()):
            code = getattr(value, "__code__", None)
            if code is not None and code.co_filename.startswith("<kwsniff decoder"):
                atheris.instrument_func(value)
        return decode

    return compile_and_instrument


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in targets.TARGETS:
        sys.exit(f"usage: {sys.argv[0]} {{{','.join(targets.TARGETS)}}} [libFuzzer options]")
    name = sys.argv[1]
    protocol_decode.compile_message = _instrumented_compile(protocol_decode.compile_message)
    atheris.Setup([sys.argv[0], *sys.argv[2:]], targets.TARGETS[name])
    atheris.Fuzz()


if __name__ == "__main__":
    main()
