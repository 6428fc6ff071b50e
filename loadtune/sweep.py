"""A whole sweep: plan the trials, run each in isolation, rank, add `combined`, write the CSV."""

from __future__ import annotations

import multiprocessing
import os
import socket
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from loadtune.config import RunSpec
from loadtune.device import is_accelerator, resolve_device
from loadtune.errors import ConfigError
from loadtune.factory import build_dataset, dataset_length, load_callable
from loadtune.machine import fingerprint, usable_cores
from loadtune.plan import Trial, combined_trial, ofat_plan
from loadtune.rank import Scored, rank
from loadtune.results import ResultsFile, apply_ranking, make_row
from loadtune.run import Outcome, run_isolated
from loadtune.stats import TrialStats, summarize
from loadtune.trial import TrialJob

Event = Callable[[str, dict[str, Any]], None]


@dataclass
class SweepResult:
    out_path: Path
    rows: list[dict[str, Any]]
    device: str
    rank_by: str
    warnings: list[str] = field(default_factory=list)
    trials: dict[str, Trial] = field(default_factory=dict)


def default_output(spec: RunSpec) -> Path:
    """SPEC §1: config `output`, else results/<name>-<host>-x<scale>.csv."""
    if spec.config.output:
        out = Path(spec.config.output)
        return out if out.is_absolute() else spec.base_dir / out
    host = socket.gethostname().split(".")[0]
    return Path("results") / f"{spec.name}-{host}-x{spec.scale:g}.csv"


def preflight(spec: RunSpec, device: str) -> int | None:
    """Build every user part once here, so a broken factory fails before any trial with a
    clear error, not as a row per trial. Returns the dataset's length (None if iterable)."""
    from torch.utils.data import IterableDataset

    from loadtune.steps import build_step

    cfg = spec.config
    dataset = build_dataset(cfg.dataset.factory, cfg.dataset.kwargs, spec.base_dir)
    if isinstance(dataset, IterableDataset) and cfg.loader.shuffle:
        raise ConfigError(f"{spec.path}: loader.shuffle = True: DataLoader cannot shuffle an "
                          f"IterableDataset ({cfg.dataset.factory}); set shuffle: false")
    for key in ("collate_fn", "worker_init_fn"):
        value = getattr(cfg.loader, key)
        if value is not None:
            load_callable(value, spec.base_dir, f"loader.{key}")
    build_step(cfg.step, spec.base_dir, device)
    return dataset_length(dataset)


def _warnings_for(row: dict[str, Any], stats: TrialStats | None) -> list[str]:
    notes = []
    if stats is not None and stats.noisy:
        spread = stats.throughput.relative_spread * 100
        notes.append(f"{row['trial']}: unstable result, throughput ±{spread:.0f}%: use --repeats 5 or more, "
                     "a longer --batches, or close other programs")
    return notes


def run_sweep(spec: RunSpec, out_path: Path, rank_by: str = "throughput",
              on_event: Event | None = None) -> SweepResult:
    emit = on_event or (lambda kind, data: None)
    cfg = spec.config
    device = resolve_device(cfg.device)
    accelerator = is_accelerator(device)
    dataset_len = preflight(spec, device)
    cores = usable_cores()
    context = {
        **fingerprint(),
        "config_name": spec.name,
        "config_sha": spec.sha,
        "dataset_len": dataset_len,
        "scale": spec.scale,
        "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": device,
    }
    trials = ofat_plan(cfg, accelerator)
    results = ResultsFile(out_path)
    results.start()
    result = SweepResult(out_path, [], device, rank_by)
    if any(t.loader_kwargs.get("num_workers", 0) > cores for t in trials):
        result.warnings.append(f"some trials use more workers than the {cores} usable cores: they compete "
                               "with the training step; rank by throughput, not wait ratio")
    stats_by_name: dict[str, TrialStats] = {}
    rows: list[dict[str, Any]] = []
    emit("plan", {"trials": trials, "out_path": out_path, "device": device, "dataset_len": dataset_len})

    def measure(trial: Trial, index: int, total: int) -> None:
        emit("trial_start", {"trial": trial, "index": index, "total": total})
        result.trials[trial.name] = trial
        outcome: Outcome | None = None
        stats = None
        if not trial.skipped:
            job = TrialJob(trial, cfg.dataset, cfg.step, cfg.measure, device, str(spec.base_dir), os.getpid(),
                           multiprocessing.get_start_method())
            outcome = run_isolated(job, cfg.measure.timeout_s)
            if outcome.measurement is not None:
                stats = summarize(outcome.measurement, cfg.measure.epoch_batches)
                stats_by_name[trial.name] = stats
        row = make_row(trial, outcome, stats, context)
        rows.append(row)
        results.append(row)
        result.warnings.extend(_warnings_for(row, stats))
        emit("trial_done", {"trial": trial, "row": row, "index": index, "total": total})

    def ranked_rows() -> list[dict[str, Any]]:
        scored = [Scored(r["trial"], s.throughput, s.wait_ratio) if (s := stats_by_name.get(r["trial"])) else
                  Scored(r["trial"], None, None) for r in rows]
        placings = rank(scored, rank_by)
        base = stats_by_name.get("baseline")
        return apply_ranking(rows, placings, base.throughput.mean if base else None)

    total = len(trials) + 1
    for index, trial in enumerate(trials):
        measure(trial, index, total)
    placed = {r["trial"]: r["rank"] for r in ranked_rows()}
    combined = combined_trial(cfg, [(t, placed.get(t.name)) for t in trials], accelerator)
    if combined is not None:
        measure(combined, len(trials), len(trials) + 1)
    result.rows = ranked_rows()
    results.replace(result.rows)
    emit("done", {"rows": result.rows})
    return result


def recommended(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Among the trials tied with the best, the cheapest: fewest workers, then smallest prefetch."""
    tied = [r for r in rows if r.get("tied_with_best")]
    if not tied:
        return None
    return min(tied, key=lambda r: (r["num_workers"], r["prefetch_factor"] or 0,
                                    bool(r["persistent_workers"]), bool(r["pin_memory"]),
                                    -(r["throughput"] or 0)))

