"""The report's per-capture summaries that `read` and `spark` write (kwsniff.core.output), with a
warning on stderr when they cannot be."""

from __future__ import annotations

from pathlib import Path

from kwsniff.commands import messages
from kwsniff.core import output


def summarize(
    stage: Path, memory_limit: int | None, mode: str = "auto", adding_to: Path | None = None
) -> None:
    """kwsniff.core.output.summarize, its warning said as the commands say warnings."""
    output.summarize(stage, memory_limit, mode, adding_to, messages.warnings)
