"""Reading a config file's YAML: its text, parsed, with a one-line message naming the file, line
and column of what is wrong; and the known key nearest to one the file misspells."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Iterable

import yaml

from loadtune.core.errors import ConfigError
from loadtune.core.text import one_line

# How alike (difflib's ratio, 0 to 1) an unknown key and a known one must be for the known one to
# be suggested: catches a letter or two missed, swapped or doubled, not a different word.
SUGGEST_CUTOFF = 0.6


def parse_yaml(text: str) -> Any:
    """yaml.safe_load; RecursionError (brackets nested thousands deep) becomes a YAMLError."""
    try:
        return yaml.safe_load(text)
    except RecursionError:
        raise yaml.YAMLError("nested too deeply") from None


def yaml_problem(exc: yaml.YAMLError) -> str:
    problem = getattr(exc, "problem", None) or next(iter(str(exc).splitlines()), "") or type(exc).__name__
    context = getattr(exc, "context", None)
    if context:
        mark, problem_mark = getattr(exc, "context_mark", None), getattr(exc, "problem_mark", None)
        if mark is not None and (problem_mark is None or mark.line != problem_mark.line):
            context = f"{context} that starts at line {mark.line + 1}, column {mark.column + 1}"
        problem = f"{problem} ({context})"
    return one_line(problem)


def did_you_mean(key: Any, known: Iterable[str]) -> str:
    """"; did you mean KEY?" naming the known key nearest to an unknown `key` (case aside), or ""
    when none is near enough (SUGGEST_CUTOFF)."""
    close = difflib.get_close_matches(str(key).lower(), list(known), n=1, cutoff=SUGGEST_CUTOFF)
    return f"; did you mean {close[0]}?" if close else ""


def read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not a text file (byte {exc.object[exc.start]:#04x} at offset {exc.start} "
                          "is not UTF-8)") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config file: {exc.strerror or exc}") from None
    try:
        data = parse_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise ConfigError(f"{where}: could not parse YAML: {yaml_problem(exc)}") from None
    if data is None:
        raise ConfigError(f"{path}: config file is empty")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys, got {type(data).__name__}")
    return data
