"""The Python API, for notebooks and scripts: the same sweep as `loadtune sweep` (every repeat
in a trial process of its own), returning typed results instead of printing them.

    import loadtune
    result = loadtune.sweep("my.yaml", overrides={"loader.batch_size": 64})
    result.recommended.trial, result.frame
    loader = DataLoader(dataset, **result.loader_kwargs)   # DataLoader's keywords only
    result.thread_settings                                  # main_threads / worker_threads, where set
"""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence, TypedDict

from loadtune.asked.options import ConfigSource, Overrides, SweepOptions
from loadtune.core.errors import LoadtuneError
from loadtune.present.sweep import SweepResult
from loadtune.record.settings import SPEC_KEYS, loader_keywords, thread_settings

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from loadtune.asked.config import RunSpec
    from loadtune.asked.options import MeasureKeywords, SweepKeywords
    from loadtune.comparison.values import Comparison
    from loadtune.model.predict_values import Forecast
    from loadtune.sweep_process.events import Event
    from loadtune.training_process.tune import Tuned
    from loadtune.training_process.watched import Watched


class PredictKeywords(TypedDict, total=False):
    """The target of predict(): see its keywords."""

    cores: float | None
    ranks: int
    step_ms: float | None
    scale: float | None
    ram_gb: float | None
    shm_gb: float | None
    tolerance: float | None


class Swept(SweepResult):
    """A finished sweep as `loadtune.sweep()` returns it: the SweepResult the CLI prints, whose
    `loader_kwargs` and `change` hold DataLoader's keywords only, ready for
    `DataLoader(dataset, **result.loader_kwargs)` (a "module:callable" spec of collate_fn or
    worker_init_fn imported as its callable), and whose `thread_settings` hold the thread
    settings, which no DataLoader keyword carries."""

    base_dir: Path = Path(".")  # where the config's "file.py:callable" specs are found

    @classmethod
    def of(cls, result: SweepResult, base_dir: Path) -> "Swept":
        swept = cls(**{f.name: getattr(result, f.name) for f in dataclasses.fields(result)})
        object.__setattr__(swept, "base_dir", base_dir)
        return swept

    @property
    def loader_kwargs(self) -> dict[str, Any] | None:
        """The recommended trial's DataLoader keyword arguments (thread settings: thread_settings)."""
        settings = self.summary.pick.loader_kwargs
        return None if settings is None else self._keywords(settings)

    @property
    def change(self) -> dict[str, Any] | None:
        """The recommended DataLoader keyword arguments that differ from the baseline's."""
        settings = self.summary.pick.change
        return None if settings is None else self._keywords(settings)

    @property
    def thread_settings(self) -> dict[str, Any] | None:
        """The recommended trial's thread settings where set: `main_threads` (torch's threads in the
        training process: torch.set_num_threads) and `worker_threads` (in each worker, from
        worker_init_fn); {} when it leaves both as they are."""
        settings = self.summary.pick.loader_kwargs
        return None if settings is None else thread_settings(settings)

    def _keywords(self, settings: dict[str, Any]) -> dict[str, Any]:
        from torch.utils.data import DataLoader

        from loadtune.parts.factory import load_callable

        accepted = inspect.signature(DataLoader).parameters
        out = {}
        for key, value in loader_keywords(settings).items():
            if key not in accepted and key == "in_order" and value is True:
                continue  # an older torch: always in order
            if key in SPEC_KEYS and isinstance(value, str):
                value = load_callable(value, self.base_dir, f"loader.{key}")
            out[key] = value
        return out


def load(config: ConfigSource, overrides: Overrides = None, scale: float = 1.0,
         **measure: Unpack[MeasureKeywords]) -> "RunSpec":
    """A RunSpec from a config file or a mapping (the same keys as the YAML; factories may be
    given as callables from importable modules). `measure` takes the shorthands (repeats,
    batches, warmup, tolerance, budget, device)."""
    return SweepOptions.of(config, overrides, scale=scale, **measure).spec()


def sweep(config: ConfigSource, *, out: str | Path | None = None, overrides: Overrides = None,
          on_event: Callable[[Event], None] | None = None, **options: Unpack[SweepKeywords]) -> Swept:
    """Run a sweep as `loadtune sweep` does and return its result (Swept: the SweepResult, its
    `loader_kwargs` DataLoader's keywords only, the thread settings in `thread_settings`).

    `config` is a YAML path or a mapping of the same keys. `overrides` are `--set` assignments
    ("KEY=VALUE" strings, or a mapping of dotted keys to values). `options` are the keywords of
    loadtune.asked.options.SweepOptions.of: repeats, batches, warmup, tolerance, budget, device (config
    shorthands, as the CLI's), scale, strategy ("model"), rank_by ("throughput"), ranks (1),
    resume (False: an existing `out` is refused unless resumed or, with overwrite=True, replaced),
    overwrite (False), seed. `on_event` is given each sweep event. Raises LoadtuneError for
    anything the user can fix.
    """
    from loadtune.sweep_process import events
    from loadtune.sweep_process.pipeline import run_sweep

    asked = SweepOptions.of(config, overrides, out=Path(out) if out is not None else None, **options)
    result = run_sweep(asked, on_event=on_event or events.ignore)
    return Swept.of(result, base_dir(asked))


def base_dir(asked: SweepOptions) -> Path:
    """Where a config's "file.py:callable" specs are found: beside its file (a mapping: here)."""
    if isinstance(asked.config, (str, Path)):
        return Path(asked.config).resolve().parent
    return Path.cwd()


def compare(*csvs: str | Path, force: bool = False) -> "Comparison":
    """Compare results CSVs as `loadtune compare` does: a comparison.values.Comparison (its
    `verdict`, `changed`, `winners` and aligned `table`)."""
    from loadtune.comparison.files import compare as compare_results, load_results

    paths: Sequence[str | Path] = csvs
    if len(csvs) == 1 and isinstance(csvs[0], (list, tuple)):
        paths = tuple(csvs[0])
    return compare_results(load_results(paths), force=force)


def predict(csv: str | Path, *, cores: float | None = None, ranks: int = 1, step_ms: float | None = None,
            scale: float | None = None, ram_gb: float | None = None, shm_gb: float | None = None,
            tolerance: float | None = None) -> "Forecast":
    """What `loadtune predict` says of another machine: a model.predict_values.Forecast (its
    `recommended` row, every config's `rows`, `extrapolated`, `to_json()`)."""
    from loadtune.core.kinds import TOLERANCE
    from loadtune.model.predict import forecast_file
    from loadtune.model.predict_values import Target

    target = Target(cores=cores, ranks=ranks, step_ms=step_ms, scale=scale, ram_gb=ram_gb, shm_gb=shm_gb)
    return forecast_file(csv, target, TOLERANCE if tolerance is None else tolerance)


def watch(loader: Any, *, out: str | Path | None = None, every_s: float = 60.0,
          name: str | None = None) -> "Watched":
    """The loader a training loop already has, watched as it trains: `for batch in
    loadtune.watch(loader): ...` iterates as the loader does, records each batch's wait and step
    (the warm-up dropped as a sweep drops it) with the evidence a sweep's trial records, says a
    line every `every_s` seconds (a warning with the remedy when the loop waits for data), and
    writes `out` (default results/watch-NAME.csv: rows with status `watched`) at every interval
    and when the process ends. docs/watch.md."""
    from loadtune.training_process.watched import watch as start

    return start(loader, out=out, every_s=every_s, name=name)


__all__ = ["LoadtuneError", "SweepOptions", "SweepResult", "Swept", "compare", "load", "predict", "sweep", "watch"]


def tune(loader: Any, *, out: str | Path | None = None, budget_s: float = 60.0, name: str | None = None,
         tune: Sequence[str] | None = None) -> "Tuned":
    """The loader a training loop already has, its settings tuned in the run itself: `for batch in
    loadtune.tune(loader): ...` iterates as the loader does, tries the settings `tune` allows
    (default num_workers, prefetch_factor, persistent_workers, pin_memory; never shuffle,
    drop_last, the sampler or the batch size) on the real step for about `budget_s` seconds, each
    sample handed once, and keeps the best for the rest of the run; `out` (default
    results/watch-NAME.csv) gets a `tuned` row per setting tried and a `watched` row of the kept one.
    docs/tune.md."""
    from loadtune.training_process.tune import tune as start

    return start(loader, out=out, budget_s=budget_s, name=name, tune=tune)

