"""loadtune: measure which DataLoader settings keep the accelerator fed.

The command line is `loadtune`; from Python (a notebook, a script):

    import loadtune
    result = loadtune.sweep("my.yaml")            # or a dict of the same keys
    result.recommended, result.loader_kwargs, result.frame
    loadtune.compare("small.csv", "large.csv").verdict
    loadtune.predict("small.csv", cores=16, ranks=4).recommended   # another machine
    for batch in loadtune.watch(loader): ...       # the real training run, watched
    for batch in loadtune.tune(loader): ...        # ... and its loader's settings tuned as it trains
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

from loadtune.core.version import __version__  # noqa: F401 - part of the package's interface

if TYPE_CHECKING:
    from pathlib import Path

    from typing_extensions import Unpack

    from loadtune.api import PredictKeywords, Swept
    from loadtune.asked.options import ConfigSource, Overrides, SweepKeywords
    from loadtune.comparison.values import Comparison
    from loadtune.model.predict_values import Forecast
    from loadtune.sweep_process.events import Event
    from loadtune.training_process.tune import Tuned
    from loadtune.training_process.watched import Watched


def sweep(config: ConfigSource, *, out: str | Path | None = None, overrides: Overrides = None,
          on_event: Callable[[Event], None] | None = None, **options: Unpack[SweepKeywords]) -> Swept:
    """Run a sweep as `loadtune sweep` does; see loadtune.api.sweep."""
    from loadtune.api import sweep as run

    return run(config, out=out, overrides=overrides, on_event=on_event, **options)


def compare(*csvs: str | Path, force: bool = False) -> Comparison:
    """Compare results CSVs as `loadtune compare` does; see loadtune.api.compare."""
    from loadtune.api import compare as run

    return run(*csvs, force=force)


def predict(csv: str | Path, **target: Unpack[PredictKeywords]) -> Forecast:
    """What another machine should use, as `loadtune predict` says; see loadtune.api.predict."""
    from loadtune.api import predict as run

    return run(csv, **target)


def watch(loader: Any, *, out: str | Path | None = None, every_s: float = 60.0, name: str | None = None) -> Watched:
    """The loader a training loop already has, watched as it trains; see loadtune.api.watch."""
    from loadtune.api import watch as start

    return start(loader, out=out, every_s=every_s, name=name)


def tune(loader: Any, *, out: str | Path | None = None, budget_s: float = 60.0, name: str | None = None,
         tune: Sequence[str] | None = None) -> Tuned:
    """The loader a training loop already has, its settings tuned as it trains; see loadtune.api.tune."""
    from loadtune.api import tune as start

    return start(loader, out=out, budget_s=budget_s, name=name, tune=tune)

