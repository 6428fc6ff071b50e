"""Text helpers shared by messages, tables and charts."""

from __future__ import annotations

from typing import Any

from loadtune.kinds import Status


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
