"""The small JSON files beside a results CSV (NAME.loader.json, NAME.decision.json): each
written whole and replaced at once (written beside it, then renamed over it), so a reader never
sees half a file."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from loadtune.core.errors import ResultsError


def replace_json(path: Path, data: Any, what: str) -> Path:
    """`data` as JSON at `path`, replaced at once; a ResultsError naming the file and `what` it
    holds where it cannot be written."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        raise ResultsError(f"{path}: cannot write {what}: {exc.strerror or exc}") from None
    return path
