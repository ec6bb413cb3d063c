"""Exit statuses every command shares (docs/datasets.md lists them all). A command stopped by a
signal: kwsniff/commands/signals.py."""

# `--strict`: everything was read, but not everything was decoded (or an input failed).
EXIT_STRICT = 3
