"""`loadtune.watch(loader)`: the loader a training loop already has, watched as it trains."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Iterator, TypeVar

from loadtune.core.errors import ConfigError
from loadtune.record.record import Record
from loadtune.training_process.hook import plain_iter
from loadtune.training_process.run import RunWatch, run_for, script_name
from loadtune.training_process.watch import LoaderWatch

T = TypeVar("T", bound="InTheRun")


class InTheRun:
    """What a training loop iterates in place of its loader (Watched, training_process.tune.Tuned):
    the loader's length and attributes; leaving a `with` block writes the run's file."""

    loader: Any
    run: RunWatch

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)

    def __enter__(self: T) -> T:
        return self

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        """Leaving a `with` block writes the file; the run goes on (a block per epoch is one run),
        unless the block raised: then it ends, its reason said."""
        if kind is not None and kind is not GeneratorExit:
            self.close(f"the loop raised {kind.__name__}")
        else:
            self.run.flush()

    @property
    def out(self) -> Path:
        """Where the rows go: the file asked for, or beside it where one was there before the run."""
        return self.run.file

    def close(self, reason: str = "") -> list[Record]:
        """Ends the watch of every loader of its run now, writes the file and says the closing
        line; returns the rows written."""
        return self.run.close(reason)


class Watched(InTheRun):
    """Iterates as `loader` does (and has its length and attributes); each epoch is watched. The
    rows go to the run's file at every interval and when the process ends, or at `close()`."""

    def __init__(self, loader: Any, run: RunWatch, watch: LoaderWatch) -> None:
        self.loader, self.run, self.watch = loader, run, watch

    def __iter__(self) -> Iterator[Any]:
        return self.watch.iterate(lambda: plain_iter(self.loader))


def watch(loader: Any, *, out: str | os.PathLike[str] | None = None, every_s: float = 60.0,
          name: str | None = None) -> Watched:
    """`for batch in loadtune.watch(loader): ...` (docs/watch.md)."""
    if not (isinstance(every_s, (int, float)) and math.isfinite(every_s) and every_s > 0):
        raise ConfigError(f"loadtune.watch: every_s must be a number of seconds above 0, got {every_s!r}")
    if not hasattr(loader, "__iter__"):
        raise ConfigError(f"loadtune.watch: {type(loader).__name__} is not iterable: pass the DataLoader")
    run = run_for(out, float(every_s), name or script_name())
    return Watched(loader, run, run.watch(loader, name))
