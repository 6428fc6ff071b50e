"""The Python API, for notebooks and scripts: the same sweep as `loadtune sweep` (every repeat
in a trial process of its own), returning typed results instead of printing them.

    import loadtune
    result = loadtune.sweep("my.yaml", overrides={"loader.batch_size": 64})
    result.recommended.trial, result.loader_kwargs, result.frame
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from loadtune.errors import ConfigError, LoadtuneError
from loadtune.results.record import Record, to_frame

# Options of sweep() and the config keys (or run settings) they set.
MEASURE_OPTIONS = {"repeats": "measure.repeats", "batches": "measure.batches", "warmup": "measure.warmup_batches",
                   "tolerance": "measure.tolerance", "budget": "measure.budget_s", "device": "device"}
RUN_OPTIONS = ("scale", "strategy", "rank_by", "ranks", "resume", "seed", "on_event")
CALLABLE_KEYS = (("dataset", "factory"), ("step", "factory"), ("loader", "collate_fn"), ("loader", "worker_init_fn"))


@dataclass(frozen=True)
class SweepResult:
    """A finished sweep: its rows (records, best first), the recommended one and the DataLoader
    keyword arguments to use, how sure the pick is, and the summary the CLI prints."""

    out_path: Path
    rows: tuple[Record, ...]
    recommended: Record | None
    loader_kwargs: dict[str, Any] | None  # the recommended trial's settings (threads: see summary.dataloader)
    change: dict[str, Any] | None  # those that differ from the baseline's
    decided: bool | None
    summary: Any  # results.report.Summary

    @property
    def frame(self) -> Any:
        """The rows as a pandas DataFrame, typed by the results' column table."""
        return to_frame(self.rows)


def _spec_of(value: Any, where: str) -> Any:
    """A callable given in a config dict, as the "module:callable" spec trial processes import."""
    if isinstance(value, str) or not callable(value):
        return value
    module, name = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    if module == "__main__" or module is None or name is None or "<" in name:
        raise ConfigError(f"{where}: {getattr(value, '__name__', value)!r} is defined in the notebook or script "
                          "itself (__main__), which trial processes cannot import: move it into a .py file next "
                          "to the notebook (say data.py) and give \"data.py:NAME\", or import it from there")
    return f"{module}:{name}"


def _with_specs(data: Mapping[str, Any]) -> dict[str, Any]:
    """The config mapping with callables given for factories and loader functions as specs."""
    out = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in data.items()}
    for section, key in CALLABLE_KEYS:
        part = out.get(section)
        if isinstance(part, dict) and key in part:
            part[key] = _spec_of(part[key], f"{section}.{key}")
    return out


def _assignments(overrides: Mapping[str, Any] | Sequence[str] | None) -> list[str]:
    if overrides is None:
        return []
    if isinstance(overrides, Mapping):
        return [f"{key}={json.dumps(value)}" for key, value in overrides.items()]
    return list(overrides)


def load(config: str | Path | Mapping[str, Any], overrides: Mapping[str, Any] | Sequence[str] | None = None,
         scale: float = 1.0, **measure: Any) -> Any:
    """A RunSpec from a config file or a mapping (the same keys as the YAML; factories may be
    given as callables from importable modules). `measure` takes the MEASURE_OPTIONS."""
    from loadtune.config import config_from_data, load_config

    sets = _assignments(overrides)
    for option, value in measure.items():
        if option not in MEASURE_OPTIONS:
            raise TypeError(f"sweep() got an unexpected option {option!r}")
        if value is not None:
            sets.append(f"{MEASURE_OPTIONS[option]}={json.dumps(value)}")
    if isinstance(config, Mapping):
        return config_from_data(_with_specs(config), Path.cwd() / "<config>", sets, scale)
    return load_config(config, sets, scale)


def sweep(config: str | Path | Mapping[str, Any], *, out: str | Path | None = None,
          overrides: Mapping[str, Any] | Sequence[str] | None = None, **options: Any) -> SweepResult:
    """Run a sweep as `loadtune sweep` does and return its result.

    `config` is a YAML path or a mapping of the same keys. `overrides` are `--set` assignments
    ("KEY=VALUE" strings, or a mapping of dotted keys to values). `options`: repeats, batches,
    warmup, tolerance, budget, device (config shorthands, as the CLI's), and scale, strategy
    ("model"), rank_by ("throughput"), ranks (1), resume (False), seed, on_event (a callable
    given each sweep event). Raises LoadtuneError for anything the user can fix.
    """
    from loadtune.sweep_process.runner import default_output, run_sweep

    run = {k: options.pop(k) for k in list(options) if k in RUN_OPTIONS}
    spec = load(config, overrides, run.pop("scale", 1.0), **options)
    spec = dataclasses.replace(spec, ranks=int(run.pop("ranks", 1)))
    out_path = Path(out) if out is not None else default_output(spec)
    strategy, rank_by = run.pop("strategy", "model"), run.pop("rank_by", "throughput")
    on_event: Callable[[Any], None] | None = run.pop("on_event", None)
    result = run_sweep(spec, out_path, rank_by, strategy, resume=bool(run.pop("resume", False)),
                       seed=int(run.pop("seed", 0)), **({"on_event": on_event} if on_event else {}))
    summary = summary_of(result, spec, rank_by, strategy, out_given=out is not None)
    return SweepResult(result.out_path, result.records, summary.recommended, summary.loader_kwargs, summary.change,
                       summary.decided, summary)


def chosen_record(result: Any) -> Record | None:
    """The recommendation: racing's pick when it is tied with the best (it knows every setting's
    cost), else the cheapest record tied with the best."""
    from loadtune.results.choice import recommended

    pick = result.decision.pick if result.decision is not None else None
    picked = next((r for r in result.records if r.trial == pick and r.tied_with_best), None)
    return picked or recommended(result.records)


def summary_of(result: Any, spec: Any, rank_by: str, strategy: str, *, out_given: bool = False) -> Any:
    """The summary of a finished sweep (runner.SweepResult of `spec`), as the CLI prints it and
    the API returns it: the recommendation, what to change, how sure, and with ranks the
    one-rank sweep of the same config beside it."""
    from loadtune.results.record import rank_file
    from loadtune.results.report import summarize_sweep

    chosen = chosen_record(result)
    kwarg = spec.config.dataset.scale_kwarg
    meta: dict[str, Any] = dict(
        output=str(result.out_path), config=spec.name, scale=spec.scale,
        scaled=f"dataset.kwargs.{kwarg} = {spec.config.dataset.kwargs[kwarg]}" if kwarg else None,
        device=result.device, ranks=spec.ranks, rank_by=rank_by, strategy=strategy, warnings=result.warnings,
        decision=result.decision, source=result.source, factory=spec.config.dataset.factory, data=result.data,
        model=result.model, notes=tuple(getattr(result, "notes", ())))
    if chosen is not None:
        meta.update(zip(("speedup_lo", "speedup_hi"), speedup_interval(getattr(result, "scores", {}), chosen.trial)))
    if spec.ranks > 1:
        meta.update(one_rank=_one_rank(spec), per_rank_csv=str(rank_file(result.out_path)), out_given=out_given,
                    torchrun=spec.torchrun)
    if chosen is not None:
        from loadtune.results.transfer import settings_of, travel

        # Fitted again as `loadtune predict` fits it (whole epochs, as training runs them), so the
        # line agrees with the command it points to.
        moved, same = travel(result.records, settings_of(chosen), spec.config.measure.tolerance)
        meta.update(travel=tuple(moved), travel_same=tuple(same))
    chosen_trial = result.trials.get(chosen.trial) if chosen is not None else None
    baseline = result.trials.get("baseline")
    return summarize_sweep(result.records, chosen, chosen_trial.loader_kwargs if chosen_trial else None,
                           baseline.loader_kwargs if baseline is not None and baseline.settings else None, **meta)


def speedup_interval(scores: Mapping[str, Any], trial: str | None, baseline: str = "baseline",
                     level: float = 0.95) -> tuple[float | None, float | None]:
    """A 95% interval of `trial`'s throughput over the baseline's, from the two trials' bootstrap
    draws (drawn independently); (None, None) where either has none."""
    from loadtune.sweep_process.decide import throughput_ratio_interval

    a, b = scores.get(trial or ""), scores.get(baseline)
    if a is None or b is None or trial == baseline:
        return None, None
    return throughput_ratio_interval(a, b, level) or (None, None)


def _one_rank(spec: Any) -> Any:
    """The one-rank sweep of the same config and scale, when its CSV is where a plain
    `loadtune sweep` writes it: its recommendation, to set beside the ranks' one."""
    from loadtune.errors import ResultsError
    from loadtune.results.choice import recommended
    from loadtune.results.record import read_records
    from loadtune.results.report import OneRank
    from loadtune.sweep_process.runner import default_output

    path = default_output(dataclasses.replace(spec, ranks=1))
    try:
        records = [r for r in read_records(path) if r.config_sha == spec.sha and r.scale == spec.scale
                   and (r.ranks or 1) == 1]
    except ResultsError:  # unreadable: as if it were not there
        records = []
    chosen = recommended(records)
    if chosen is None or chosen.throughput is None:
        return OneRank(str(path))
    return OneRank(str(path), chosen.trial, chosen.throughput)


def compare(*csvs: str | Path, force: bool = False) -> Any:
    """Compare results CSVs as `loadtune compare` does: a results.compare.Comparison (its
    `verdict`, `changed`, `winners` and aligned `table`)."""
    from loadtune.results.compare import compare as compare_results
    from loadtune.results.compare import load_results

    if len(csvs) == 1 and isinstance(csvs[0], (list, tuple)):
        csvs = tuple(csvs[0])
    return compare_results(load_results(csvs), force=force)


def predict(csv: str | Path, *, cores: float | None = None, ranks: int = 1, step_ms: float | None = None,
            scale: float | None = None, ram_gb: float | None = None, shm_gb: float | None = None,
            tolerance: float | None = None) -> Any:
    """What `loadtune predict` says of another machine: a results.transfer.Forecast (its
    `recommended` row, every config's `rows`, `extrapolated`, `to_json()`)."""
    from loadtune.results.transfer import TOLERANCE, Target, forecast_file

    target = Target(cores=cores, ranks=ranks, step_ms=step_ms, scale=scale, ram_gb=ram_gb, shm_gb=shm_gb)
    return forecast_file(csv, target, TOLERANCE if tolerance is None else tolerance)


__all__ = ["LoadtuneError", "SweepResult", "compare", "load", "predict", "sweep"]
