"""Exit statuses every command shares (kwsniff.core.exits; docs/datasets.md lists them all)."""

from kwsniff.core.exits import EXIT_STRICT

__all__ = ["EXIT_STRICT"]
