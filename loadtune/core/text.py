"""Text helpers shared by messages, tables and charts."""

from __future__ import annotations

import os
from typing import Any

from loadtune.core.kinds import Status


def one_line(text: str) -> str:
    """Whitespace, newlines included, collapsed to single spaces."""
    return " ".join(text.split())


def short(text: str, limit: int, ellipsis: str = "...") -> str:
    """`text` on one line, cut to at most `limit` characters with an ellipsis."""
    text = one_line(text)
    return text if len(text) <= limit else text[: limit - len(ellipsis)] + ellipsis


def short_repr(value: Any, limit: int) -> str:
    """repr(value) cut to at most `limit` characters: a user's value quoted in a message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def first_line(exc: BaseException) -> str:
    """The first non-empty line of an exception's message (messages are one line)."""
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 - a user exception whose __str__ fails
        return ""
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")


def fmt(value: Any, digits: int = 2) -> str:
    """A table cell: '-' for nothing, floats to `digits` places."""
    if value is None or value == "" or (isinstance(value, float) and value != value):
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


# How a row's status is shown in tables.
STATUS_STYLE = {Status.OK: "", Status.SKIPPED: "dim", Status.FAILED: "red", Status.TIMEOUT: "red", "absent": "dim"}


# The width of prose when output is not a terminal (a file, a pipe, a CI log) and COLUMNS is not set.
DEFAULT_WIDTH = 100


def output_width(stream: Any) -> int:
    """How wide prose on `stream` may be: COLUMNS when set, else the terminal's, else DEFAULT_WIDTH."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        if stream.isatty():
            return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        pass
    return DEFAULT_WIDTH


# Continuation lines of a wrapped item start this much further in than its first line, so that
# a line that starts further in than the one above continues it, and one that does not is a new item.
HANGING_INDENT = 4


def wrap(text: str, width: int | None, hanging: int = HANGING_INDENT) -> list[str]:
    """One item of prose (a message, a line of the answer) as lines of at most `width`
    characters, broken at spaces only, never inside a word: the first line keeps the item's own
    indent; each further line is indented `hanging` more, so `Recommended: …` continues
    indented under it. A word longer than a line (a path, say) stands alone on its line, whole.
    Runs of spaces inside the item become one; a newline in it starts a continuation line.
    `width` None: the item as it is, on one line per newline."""
    lead = len(text) - len(text.lstrip(" "))
    paragraphs = text.strip(" ").split("\n")
    if width is None:
        return [" " * lead + paragraphs[0], *(" " * (lead + hanging) + p.strip() for p in paragraphs[1:])]
    lines: list[str] = []
    for number, paragraph in enumerate(paragraphs):
        indent = " " * (lead if number == 0 else lead + hanging)
        line = ""
        for word in paragraph.split():
            if line and len(line) + 1 + len(word) <= width:
                line += " " + word
                continue
            if line:
                lines.append(line)
                indent = " " * (lead + hanging)
            line = indent + word
        lines.append(line or indent.rstrip())
    return lines
