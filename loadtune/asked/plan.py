"""What to measure: the trials of a sweep (docs/methodology.md, "Trials"), as frozen records of what was asked."""

from __future__ import annotations

import itertools
from typing import Any, Mapping, Sequence

from loadtune.asked.config import WORKER_ONLY, Config
from loadtune.asked.trials import (
    BASELINE,
    COMBINED,
    DEFAULT_PREFETCH,
    FEED_MEMORY,
    IDEAL,
    Trial,
    effective_settings,
    format_value,
)

# Settings as (key, value) pairs (config_key: sorted, as DataLoader applies them).
Settings = tuple[tuple[str, object], ...]


def _freeze(kwargs: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(kwargs.items()))


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def _same_prefetch(kwargs: Mapping[str, Any], value: Any, base_value: Any) -> bool:
    """With workers, prefetch_factor None is DataLoader's default of 2: the same setting."""
    return kwargs.get("num_workers", 0) > 0 and {value, base_value} == {None, DEFAULT_PREFETCH}


def changes_from_baseline(config: Config, trial: Trial) -> dict[str, Any]:
    """A trial's settings as changes from the baseline, to rebuild it with one key moved."""
    base = config.loader.model_dump()
    return {k: v for k, v in trial.settings if k in base and not _same(v, base[k])}


def refusal(kwargs: Mapping[str, Any], accelerator: bool) -> str | None:
    """Why this combination cannot be measured here, or None when it can."""
    if kwargs.get("num_workers", 0) == 0:
        if kwargs.get("prefetch_factor") is not None:
            return f"DataLoader refuses prefetch_factor={kwargs['prefetch_factor']} with num_workers=0"
        if kwargs.get("persistent_workers"):
            return "DataLoader refuses persistent_workers=true with num_workers=0"
        if kwargs.get("multiprocessing_context") is not None:
            return "DataLoader refuses multiprocessing_context with num_workers=0"
        if kwargs.get("worker_threads") is not None:
            return "worker_threads sets the threads of workers: there are none with num_workers=0"
    if kwargs.get("pin_memory") and not accelerator:
        return ("no accelerator: pin_memory only speeds up copies to a GPU "
                "(DataLoader warns and does nothing on CPU)")
    return None


def _with_change(base: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    kwargs = {**base, **changes}
    if kwargs.get("num_workers") == 0 and base.get("num_workers", 0) > 0:
        # Inherited worker-only settings would make DataLoader refuse the run; the user
        # asked for no workers, so measure that with DataLoader's own defaults.
        for key, default in WORKER_ONLY.items():
            if key not in changes:
                kwargs[key] = default
    return kwargs


def baseline_trial(config: Config) -> Trial:
    return Trial(BASELINE, BASELINE, None, _freeze(config.loader.model_dump()))


def ideal_trial(config: Config) -> Trial:
    """The reference: the baseline's step fed from one batch kept in memory on the device."""
    return Trial(IDEAL, IDEAL, None, _freeze(config.loader.model_dump()), feed=FEED_MEMORY)


def on_top(config: Config, trial: Trial, changes: Mapping[str, Any], accelerator: bool) -> Trial:
    """`trial` with `changes` applied on top of its own, named as trial_for names it."""
    return trial_for(config, {**changes_from_baseline(config, trial), **changes}, accelerator)


def trial_for(config: Config, changes: Mapping[str, Any], accelerator: bool) -> Trial:
    """The baseline with `changes` applied, named by what differs from the baseline."""
    base = config.loader.model_dump()
    kwargs = _with_change(base, changes)
    if kwargs.get("num_workers") == 0:
        kwargs.update(WORKER_ONLY)
    if _same_prefetch(kwargs, kwargs.get("prefetch_factor"), base["prefetch_factor"]):
        kwargs["prefetch_factor"] = base["prefetch_factor"]  # spelled as the baseline does
    diff = {k: v for k, v in kwargs.items() if not _same(v, base[k])}
    keys = [k for k in config.sweep if k in diff] + [k for k in diff if k not in config.sweep]
    if not kwargs.get("num_workers"):
        keys = [k for k in keys if k not in WORKER_ONLY]  # named as ofat_plan names it: never without workers
    if not keys:
        return baseline_trial(config)
    if len(keys) == 1:
        key = keys[0]
        return Trial(f"{key}={format_value(diff[key])}", key, diff[key], _freeze(kwargs),
                     refusal(kwargs, accelerator))
    label = ", ".join(f"{k}={format_value(diff[k])}" for k in keys)
    return Trial(label, "+".join(keys), label, _freeze(kwargs), refusal(kwargs, accelerator))


def swept_values(config: Config) -> dict[str, list[Any]]:
    """Each swept key's values with the baseline's own first: a sweep lists the values to try
    instead of the baseline's (`prefetch_factor: [1, 4]` from 2), and a combination may keep the
    baseline's value of one key while changing another (num_workers=2 with persistent workers,
    prefetch_factor left at 2)."""
    base = config.loader.model_dump()
    out: dict[str, list[Any]] = {}
    for key, values in config.sweep.items():
        own = [base[key]] if key in base and not any(_same(v, base[key]) for v in values) else []
        out[key] = [*own, *values]
    return out


def grid_plan(config: Config, accelerator: bool) -> list[Trial]:
    """Every combination of the swept values and the baseline's (settings that mean nothing
    without workers collapse when num_workers is 0), baseline first."""
    space = swept_values(config)
    keys = list(space)
    trials = [baseline_trial(config)]
    seen = {trials[0].settings}
    for values in itertools.product(*(space[k] for k in keys)):
        trial = trial_for(config, dict(zip(keys, values)), accelerator)
        if trial.settings not in seen:
            seen.add(trial.settings)
            trials.append(trial)
    return trials


def ofat_plan(config: Config, accelerator: bool) -> list[Trial]:
    """Baseline first, then one trial per swept value that differs from it, in config order."""
    base = config.loader.model_dump()
    trials = [baseline_trial(config)]
    seen = {BASELINE}
    for key, values in config.sweep.items():
        for value in values:
            name = f"{key}={format_value(value)}"
            if _same(value, base[key]) or name in seen or (key == "prefetch_factor"
                                                            and _same_prefetch(base, value, base[key])):
                continue
            seen.add(name)
            kwargs = _with_change(base, {key: value})
            trials.append(Trial(name, key, value, _freeze(kwargs), refusal(kwargs, accelerator)))
    return trials


def combined_trial(
    config: Config,
    ranked: Sequence[tuple[Trial, int | None]],
    accelerator: bool,
) -> Trial | None:
    """The baseline with every swept key at its best-ranked value, if that is a new trial.

    `ranked` pairs each trial that was planned with its rank (None when it did not run).
    A key keeps its baseline value when the baseline ranks as well as any change of it.
    """
    baseline_rank = {trial.name: rank for trial, rank in ranked}.get(BASELINE)
    if baseline_rank is None:
        return None
    base = config.loader.model_dump()
    best: dict[str, Any] = {}
    for key in config.sweep:
        best_rank, best_value = baseline_rank, base[key]
        for trial, rank in ranked:
            if trial.changed == key and rank is not None and rank < best_rank:
                best_rank, best_value = rank, trial.value
        if not _same(best_value, base[key]):
            best[key] = best_value
    if not best:
        return None
    kwargs = _with_change(base, best)
    if kwargs.get("num_workers") == 0:
        kwargs.update(WORKER_ONLY)
    frozen = _freeze(kwargs)
    if any(trial.settings == frozen for trial, _ in ranked):
        return None
    value = ", ".join(f"{k}={format_value(v)}" for k, v in best.items())
    return Trial(COMBINED, COMBINED, value, frozen, refusal(kwargs, accelerator))



def config_key(trial: Trial) -> Settings:
    """A config as DataLoader applies it: two trials with the same key measure the same thing."""
    return tuple(sorted({**dict(trial.settings), **effective_settings(trial.loader_kwargs)}.items()))
