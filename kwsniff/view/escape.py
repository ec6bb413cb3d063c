"""Strings from the wire made safe for the reader they reach: a terminal or a spreadsheet.

Client ids, topics, group ids and user names are whatever a client sent. Printed raw, an escape
sequence among them clears the screen, sets the window title or makes the terminal type a reply
into the shell (the cursor-position query); a CSV cell starting with `=` is a formula a spreadsheet
runs. One implementation for every output: `show`, the text report and the report's CSV.
"""

from __future__ import annotations

import re

# C0 controls, DEL and C1 controls (U+0080-U+009F: an 8-bit CSI or OSC is as live as ESC [ / ESC ]).
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f]")
# What makes a spreadsheet read a cell as a formula (OWASP, "CSV Injection").
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def visible(text: str) -> str:
    """``text`` with every control character written as a visible escape (ESC as `\\x1b`)."""
    return _CONTROLS.sub(lambda m: f"\\x{ord(m[0]):02x}", text)


def csv_safe(value: object) -> object:
    """A string that would start a formula with a leading `'` (OWASP's advice), so a spreadsheet
    shows it as text; numbers and everything else unchanged (a negative number stays a number)."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value
