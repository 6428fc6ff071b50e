"""A whole sweep: preflight, a strategy choosing trials, interleaved isolated runs, ranking, CSV."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import random
import socket
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

from loadtune.config import RunSpec
from loadtune.device import is_accelerator, resolve_device
from loadtune.diagnose import diagnose
from loadtune.errors import ConfigError, FactoryError
from loadtune.machine import cpu_quota, fingerprint, shm_free_gb, usable_cores
from loadtune.measure import Measurement
from loadtune.plan import BASELINE, FEED_MEMORY, IDEAL, Trial, baseline_trial, ideal_trial
from loadtune.resources import shm_fits, shm_need_mb
from loadtune.rank import Scored, order, rank
from loadtune.results import RANK_FILE_COLUMNS, ResultsFile, apply_ranking, make_row, rank_file, rank_rows, read_rows
from loadtune.run import Outcome, preload, run_isolated
from loadtune.stats import Interval, summarize, unstable_note
from loadtune.strategy import run_strategy
from loadtune.torchrun import local_ranks
from loadtune.trial import PreflightInfo, PreflightJob, TrialJob

Event = Callable[[str, dict[str, Any]], None]
# Runs one trial job with a timeout: run.run_isolated, or torchrun.Cluster.run on every rank.
Executor = Callable[[TrialJob, float], Outcome]
# The first build of a dataset may fill a cache (download, decode, generate): allowed this long
# at least, whatever measure.timeout_s says about a trial.
PREFLIGHT_MIN_TIMEOUT_S = 600.0


@dataclass
class SweepResult:
    out_path: Path
    rows: list[dict[str, Any]]
    device: str
    rank_by: str
    strategy: str
    warnings: list[str] = field(default_factory=list)
    trials: dict[str, Trial] = field(default_factory=dict)


def default_output(spec: RunSpec) -> Path:
    """SPEC §1: config `output`, else results/<name>-<host>-x<scale>.csv; with N > 1 ranks,
    -r<N> before the suffix of either."""
    ranks = f"-r{spec.ranks}" if spec.ranks > 1 else ""  # beside the one-rank file, not over it
    if spec.config.output:
        out = Path(spec.config.output)
        out = out if out.is_absolute() else spec.base_dir / out
        return out.with_name(f"{out.stem}{ranks}{out.suffix}") if ranks else out
    host = socket.gethostname().split(".")[0]
    return Path("results") / f"{spec.name}-{host}-x{spec.scale:g}{ranks}.csv"


def preflight(spec: RunSpec, device: str) -> PreflightInfo:
    """Build every user part once, in a process of its own with a timeout (the longer of
    measure.timeout_s and PREFLIGHT_MIN_TIMEOUT_S), so a broken factory stops the sweep with a
    clear error before any trial, not as a failed row per trial."""
    cfg = spec.config
    job = PreflightJob(cfg.dataset, baseline_trial(cfg), cfg.step, device, str(spec.base_dir), str(spec.path),
                       os.getpid(), multiprocessing.get_start_method(), spec.ranks)
    timeout_s = max(cfg.measure.timeout_s, PREFLIGHT_MIN_TIMEOUT_S)
    outcome = run_isolated(job, timeout_s)
    where = f"dataset factory {cfg.dataset.factory!r}"
    if outcome.status == "timeout":
        raise FactoryError(f"{where}: building the dataset and step took longer than {timeout_s:g}s "
                           "(the longer of measure.timeout_s and the time allowed to fill caches)")
    if outcome.result is None:
        raise FactoryError(f"{where}: {outcome.reason}")
    info: PreflightInfo = outcome.result
    if info.error is not None:
        raise (ConfigError if info.error_kind == "config" else FactoryError)(info.error)
    return info


def check_ranks(ranks: int, device: str) -> None:
    """Each rank on an accelerator needs a device of its own."""
    if ranks > 1 and is_accelerator(device):
        import torch

        count = torch.cuda.device_count()
        if ranks > count:
            raise ConfigError(f"--ranks {ranks} on {device}: each rank uses a CUDA device of its own and "
                              f"this machine has {count}; use --ranks {count} or fewer, or --device cpu")


def shm_refusal(trial: Trial, batch_bytes: int | None, free_mb: float | None, ranks: int = 1) -> str | None:
    """Why a trial would not fit in /dev/shm (its workers would die of SIGBUS), or None.
    With ranks, each rank's workers hold their own batches in flight."""
    if trial.skipped or not batch_bytes or free_mb is None:
        return None
    kwargs = trial.loader_kwargs
    need = shm_need_mb(batch_bytes, kwargs.get("num_workers", 0), kwargs.get("prefetch_factor")) * ranks
    if shm_fits(need, free_mb):
        return None
    return (f"/dev/shm too small: batches in flight need about {need:.0f} MB "
            f"({batch_bytes / 2**20:.1f} MB per batch) and {free_mb:.0f} MB is free; "
            "give the container more (docker --shm-size) or use fewer workers or a smaller prefetch_factor")


def _merge(measurements: Sequence[Measurement]) -> Measurement:
    """One trial's repeats, each from a process (or set of ranks) of its own, as one Measurement."""
    windows = tuple(w for m in measurements for w in m.windows)
    first = sum(m.first_batch_s for m in measurements) / len(measurements)
    resources = tuple(r for m in measurements for r in m.resources)
    ranks = tuple(_merge(per_rank) for per_rank in zip(*(m.ranks for m in measurements)))
    return Measurement(first, windows, measurements[0].pinned, measurements[0].batch_bytes, resources,
                       warmup_s=sum(m.warmup_s for m in measurements) / len(measurements),
                       setup_s=sum(m.setup_s for m in measurements) / len(measurements), ranks=ranks)


class _Runner:
    """Measures sets of trials with their repeats interleaved: round-robin over the trials in
    a shuffled order, one process per repeat, so slow drift of the machine favours none."""

    def __init__(self, spec: RunSpec, device: str, context: dict[str, Any], results: ResultsFile,
                 emit: Event, seed: int, cores: float, shm_check: Callable[[Trial], str | None],
                 execute: Executor = run_isolated, sampled_ranks: int = 1) -> None:
        self.spec, self.device, self.context, self.results, self.emit = spec, device, context, results, emit
        self.execute = execute
        self.sampled_ranks = sampled_ranks  # ranks whose process trees the resource samples cover
        self.per_rank: ResultsFile | None = None  # NAME.ranks.csv, with ranks
        self.scratch: str | None = None  # a folder for the trials' own files, removed after the sweep
        self.cores, self.shm_check = cores, shm_check
        self.rng = random.Random(seed)
        self.rows: list[dict[str, Any]] = []
        self.scores: dict[str, Scored] = {}
        self.trials: dict[str, Trial] = {}
        self.resumed: dict[str, dict[str, Any]] = {}
        self.notes: list[str] = []
        self.runs_planned = 0
        self._partial: dict[str, list[Measurement]] = {}
        self._walls: dict[str, list[float]] = {}
        self._pending: dict[str, tuple[Trial, int]] = {}

    def _job(self, trial: Trial) -> TrialJob:
        cfg = self.spec.config
        return TrialJob(trial, cfg.dataset, cfg.step, cfg.measure.model_copy(update={"repeats": 1}), self.device,
                        str(self.spec.base_dir), os.getpid(), multiprocessing.get_start_method(), self.spec.ranks,
                        scratch=self.scratch)

    def _finish(self, trial: Trial, round_no: int, outcome: Outcome | None, measurement: Measurement | None) -> None:
        stats = None
        extra: dict[str, Any] = {}
        if measurement is not None:
            stats = summarize(measurement)
            self.scores[trial.name] = Scored(trial.name, stats.throughput, stats.wait_ratio)
            if trial.feed != FEED_MEMORY:
                diagnosis = diagnose(trial.name, trial.loader_kwargs, measurement, stats, self.cores,
                                     self.sampled_ranks)
                extra = diagnosis.columns
                self.notes.extend(w for w in diagnosis.warnings if w not in self.notes)
        row = make_row(trial, outcome, stats, {**self.context, "round": round_no}, measurement, extra)
        self.rows.append(row)
        self.results.append(row)
        if self.per_rank is not None and measurement is not None and measurement.ranks:
            for rank_row in rank_rows(trial, [(summarize(m), m) for m in measurement.ranks], self.context):
                self.per_rank.append(rank_row)
        note = unstable_note(trial.name, stats.throughput) if stats is not None else None
        if note:
            self.notes.append(note)
        self.emit("trial_done", {"trial": trial, "row": row})

    def measure(self, trials: Sequence[Trial], round_no: int) -> dict[str, Scored]:
        repeats = self.spec.config.measure.repeats
        todo = [t for t in trials if t.name not in self.trials]
        for t in todo:
            self.trials[t.name] = t
        for t in [t for t in todo if t.name in self.resumed]:
            self.emit("trial_done", {"trial": t, "row": self.resumed[t.name], "resumed": True})
        todo = [t for t in todo if t.name not in self.resumed]
        todo = [dataclasses.replace(t, skip_reason=why) if (why := self.shm_check(t)) else t for t in todo]
        runnable = [t for t in todo if not t.skipped]
        for t in todo:
            if t.skipped:
                self._finish(t, round_no, None, None)
        self.runs_planned += len(runnable) * repeats
        self.emit("planned", {"runs": self.runs_planned})
        outcomes: dict[str, Outcome] = {}
        self._partial = {t.name: [] for t in runnable}
        self._walls = {t.name: [] for t in runnable}
        self._pending = {t.name: (t, round_no) for t in runnable}
        for repeat in range(repeats):
            batch = [t for t in runnable if t.name not in outcomes]
            self.rng.shuffle(batch)
            for trial in batch:
                self.emit("run_start", {"trial": trial, "repeat": repeat + 1, "repeats": repeats})
                outcome = self.execute(self._job(trial), self.spec.config.measure.timeout_s)
                self.emit("run_done", {"trial": trial, "outcome": outcome})
                if outcome.result is None:
                    outcomes[trial.name] = outcome  # its remaining repeats will not run
                    self.emit("planned", {"runs": self.runs_planned - (repeats - repeat - 1)})
                    self.runs_planned -= repeats - repeat - 1
                    self._pending.pop(trial.name)
                    self._finish(trial, round_no, outcome, None)
                    continue
                self._partial[trial.name].append(outcome.result)
                self._walls[trial.name].append(outcome.wall_s)
                if repeat == repeats - 1:
                    self._pending.pop(trial.name)
                    self._finish(trial, round_no, self._mean_wall(trial.name), _merge(self._partial[trial.name]))
        return {t.name: self.scored(t.name) for t in trials}

    def flush_partial(self) -> None:
        """On interruption: trials with some repeats measured keep a row with what they have."""
        for name, (trial, round_no) in list(self._pending.items()):
            done = self._partial.get(name)
            if done:
                self._finish(trial, round_no, self._mean_wall(name), _merge(done))
        self._pending.clear()

    def _mean_wall(self, name: str) -> Outcome:
        """A trial that ran: ok, with the mean wall time of its processes."""
        walls = self._walls.get(name) or [0.0]
        return Outcome("ok", "", None, sum(walls) / len(walls))

    def resume(self, rows: Sequence[dict[str, Any]]) -> None:
        """Take rows measured earlier for this config and machine as already done."""
        for row in rows:
            self.resumed[row["trial"]] = row
            self.rows.append(row)
            self.scores[row["trial"]] = Scored(
                row["trial"], Interval(row["throughput"], row["throughput_lo"], row["throughput_hi"]),
                Interval(row["wait_ratio"], row["wait_ratio_lo"], row["wait_ratio_hi"]))

    def scored(self, name: str) -> Scored:
        return self.scores.get(name) or Scored(name, None, None)

    def throughput(self, name: str) -> float | None:
        score = self.scores.get(name)
        return score.throughput.mean if score and score.throughput else None


def run_sweep(spec: RunSpec, out_path: Path, rank_by: str = "throughput", strategy: str = "ofat",
              on_event: Event | None = None, seed: int = 0, resume: bool = False,
              shm_free_mb: float | None | str = "measure", execute: Executor = run_isolated) -> SweepResult:
    """Run a whole sweep and write its CSV. `shm_free_mb` is the free /dev/shm the trials are
    checked against ("measure": read it now; None: do not check). `execute` runs each trial
    job (see Executor)."""
    emit = on_event or (lambda kind, data: None)
    cfg = spec.config
    device = resolve_device(cfg.device)
    accelerator = is_accelerator(device)
    # Ranks on this host share its cores, /dev/shm and GPUs; under torchrun, the figures of
    # the process tree are rank 0's alone.
    host_ranks = local_ranks() if spec.torchrun else spec.ranks
    check_ranks(host_ranks, device)
    preload([s for s in (cfg.dataset.factory, cfg.step.factory, cfg.loader.collate_fn) if s], str(spec.base_dir))
    info = preflight(spec, device)
    dataset_len = info.dataset_len
    cores = usable_cores()
    quota = cpu_quota()
    effective_cores = min(cores, quota) if quota else cores
    if shm_free_mb == "measure":
        free_gb = shm_free_gb()
        shm_free_mb = free_gb * 1024 if free_gb is not None else None
    context = {
        **fingerprint(),
        "config_name": spec.name,
        "config_sha": spec.sha,
        "dataset_len": dataset_len,
        "scale": spec.scale,
        "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": device,
        "strategy": strategy,
        "ranks": spec.ranks,
    }
    results = ResultsFile(out_path)
    kept = resumable_rows(out_path, spec, context["host"]) if resume else []
    results.start(kept)
    # Under torchrun only rank 0's tree is sampled: its figures are against its share of the cores.
    diagnosed_cores = effective_cores / host_ranks if spec.torchrun else effective_cores
    runner = _Runner(spec, device, context, results, emit, seed, diagnosed_cores,
                     lambda trial: shm_refusal(trial, info.batch_bytes, shm_free_mb, host_ranks), execute,
                     sampled_ranks=1 if spec.torchrun else spec.ranks)
    runner.resume(kept)
    if spec.ranks > 1:
        names = {row["trial"] for row in kept}
        runner.per_rank = ResultsFile(rank_file(out_path), RANK_FILE_COLUMNS)
        earlier = [r for r in read_rows(rank_file(out_path)) if r.get("trial") in names
                   and r.get("config_sha") == spec.sha] if kept else []
        runner.per_rank.start(earlier)
    result = SweepResult(out_path, [], device, rank_by, strategy)
    emit("start", {"out_path": out_path, "device": device, "dataset_len": dataset_len, "strategy": strategy,
                   "resumed": len(kept)})
    ideal = ideal_trial(cfg)

    def measure(trials: Sequence[Trial], round_no: int) -> dict[str, Scored]:
        # The ideal reference joins the first set measured, interleaved with it.
        extra = [ideal] if IDEAL not in runner.trials else []
        return runner.measure([*extra, *trials], round_no)

    # Files the ranks' launcher leaves, in a folder that goes when the sweep ends.
    scratch = tempfile.TemporaryDirectory(prefix="loadtune-") if spec.ranks > 1 else None
    runner.scratch = scratch.name if scratch is not None else None
    try:
        run_strategy(strategy, cfg, accelerator, measure, rank_by)
    except KeyboardInterrupt:
        runner.flush_partial()
        raise
    finally:
        if scratch is not None:
            scratch.cleanup()
    result.trials = runner.trials
    result.rows = _ranked(runner, rank_by)
    result.warnings = [*_machine_warnings(runner.trials.values(), cores, host_ranks), *runner.notes,
                       *_disagreement(runner, result.rows)]
    results.replace(result.rows)
    emit("done", {"rows": result.rows})
    return result


def resumable_rows(path: Path, spec: RunSpec, host: str) -> list[dict[str, Any]]:
    """Rows of an earlier sweep at `path` that this one can keep: same config sha, scale, ranks
    and host, measured in full (status ok, as many repeats and batches as asked now)."""
    m = spec.config.measure
    return [row for row in read_rows(path)
            if row.get("config_sha") == spec.sha and row.get("host") == host and row.get("scale") == spec.scale
            and (row.get("ranks") or 1) == spec.ranks
            and row.get("status") == "ok" and row.get("repeats") == m.repeats and row.get("batches") == m.batches
            and row.get("throughput") is not None and row.get("wait_ratio") is not None]


def _ranked(runner: _Runner, rank_by: str) -> list[dict[str, Any]]:
    scored = [runner.scored(r["trial"]) for r in runner.rows if r["trial"] != IDEAL]
    placings = rank(scored, rank_by)
    return apply_ranking(runner.rows, placings, runner.throughput(BASELINE), runner.throughput(IDEAL))


def _machine_warnings(trials: Any, cores: int, ranks: int = 1) -> list[str]:
    most = max((t.loader_kwargs.get("num_workers", 0) for t in trials), default=0) * ranks
    if most > cores:
        per = f" ({ranks} ranks with their own workers)" if ranks > 1 else ""
        return [f"trials with up to {most} workers{per} on {cores} usable cores: workers beyond the cores "
                "compete with the training step; trust throughput over wait ratio for those"]
    return []


def _disagreement(runner: _Runner, rows: list[dict[str, Any]]) -> list[str]:
    """Say so when the lowest wait ratio is not among the fastest trials."""
    scored = [runner.scored(r["trial"]) for r in rows if r["trial"] != IDEAL and r.get("rank") is not None]
    if len(scored) < 2:
        return []
    lean = order(scored, "wait_ratio")[0].name
    tied = {r["trial"] for r in rows if r.get("tied_with_best")}
    if lean in tied:
        return []
    return [f"wait ratio and throughput disagree: {lean} waits least but is not among the fastest; "
            "its workers probably slow the step itself (CPU contention). Throughput is what training feels"]


def recommended(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Among the trials tied with the best, the cheapest: fewest workers, then smallest prefetch."""
    tied = [r for r in rows if r.get("tied_with_best")]
    if not tied:
        return None
    return min(tied, key=lambda r: (r["num_workers"], r["prefetch_factor"] or 0,
                                    bool(r["persistent_workers"]), bool(r["pin_memory"]),
                                    -(r["throughput"] or 0)))
