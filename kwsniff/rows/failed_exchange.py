"""An exchange whose decoding or row building raised: its reason, in one line.

Such an exception is a kwsniff bug met by one exchange's bytes, so it becomes that exchange's
`requests` row (status ``decode_error``) and the capture goes on (STYLE.md: errors are values where
traffic is concerned). The reason names the stage and the exception's class and the function that
raised it, ``rows: TypeError in merge_rows``; never the exception's text, which may quote wire bytes.
"""

from __future__ import annotations

import re

# Raised by the sink (a full disk, a reader gone from `show`'s pipe): the run's, not an exchange's.
RUN_ERRORS = (OSError,)

_REASON = re.compile(r"(request|response|rows): [A-Z]\w* in \S+")


def failed_reason(stage: str, exc: BaseException) -> str:
    """``stage``: ``request`` or ``response`` (decoding a body) or ``rows`` (building the rows)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = tb.tb_frame.f_code.co_name if tb is not None else "?"
    return f"{stage}: {type(exc).__name__} in {where}"


def is_failed_reason(reason: str) -> bool:
    return _REASON.fullmatch(reason) is not None
