"""Does the default sweep give the same answer twice? The sweep run several times on the same pipelines.

For each pipeline (the demo, configs/demo.yaml as it is; benchmarks/recommend.py's cnn, io, cpu
and mixed; and benchmarks/pipelines.py's saturated-text, whose tokenizing and CPU step keep the
cores busy at the baseline; each written as recommend.py writes them: its sweep space and measure
block):
  1. the default sweep, N times (--runs, default 5), each as a user runs it: `python -m loadtune
     sweep CONFIG --json --out DIR/NAME-runK.csv` from the repo root, timed from outside; with
     --reference-ref also the default sweep of that version (its tree from `git archive`, run with
     PYTHONPATH pointing at it, as recommend.py runs its reference), alternating with these runs;
  2. pick repeatability: run j agrees with run i's answer when its pick is run i's pick or a
     config run i called equal to its pick within the machine's noise (the summary's `equal`);
     per pipeline, the most runs agreeing with any one run's answer;
  3. interval coverage: for every ordered pair of runs (i, j) and every config measured in both,
     whether run j's throughput lies inside run i's [throughput_lo, throughput_hi];
  4. head to head over whole epochs: every run's pick, every config a run called equal, each run's
     fastest row, the baseline (the config's loader block) and for the demo num_workers=2 with
     persistent workers, with prefetch_factor 1 and 2, each run by benchmarks/plain_loop.py
     --epochs E (one whole epoch uncounted, then E timed, epoch starts included: nothing of
     loadtune) in a fresh process, in rounds of alternating order (A B C, C B A, ...). E is the
     fewest whole epochs that count at least 3 s at the fastest throughput any run measured. The
     best is the candidate with the highest median; each pick is judged by the median over rounds
     of pick / best, with the range and a 90% bootstrap interval over rounds, and, against the
     winner's curse, by the split estimate of recommend.py (the best chosen on odd rounds and
     judged on even, and the other way round);
     a pick that changes the baseline is shown faster than it when the 90% bootstrap interval of
     the median over rounds of pick / baseline lies above 1;
  5. the mean wall time of the default sweep, and with --reference-ref its ratio to the reference's.
Configs are told apart by their settings (num_workers, prefetch_factor, persistent_workers,
pin_memory; the worker-only ones dropped without workers), not by trial names.
Goals:
  the same pick or a called tie in >= 0.8 of the runs (4 of 5), on every pipeline;
  run j's throughput inside run i's interval for >= 0.90 of the pairs, over all pipelines;
  every run's pick >= 0.97 of the best, head to head, on every pipeline;
  no pick that changes the baseline without being shown faster than it head to head;
  with --reference-ref, the default sweep <= 1.3x the reference's, on every pipeline;
  every sweep completes (a failed one is reported with its log's tail and counts as a miss).
Exits 1 when any goal is missed.
Everything (configs, CSVs, each sweep's JSON summary and log, the plain loops' results) is
written to --keep DIR, else to a temporary folder removed at the end. About an hour and a
quarter on 2 cores (twice the sweeps with --reference-ref); --quick (recommend.py's quick sweep
space, 3 runs, 4 rounds) about 25 minutes.

    python benchmarks/repeatability.py [--pipelines demo,cnn,io,cpu,mixed,saturated-text] [--runs N] [--rounds N]
                                       [--epochs E] [--reference-ref REF] [--keep DIR] [--quick]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from _common import Goals
from recommend import (
    BENCH,
    LOOP_TIMEOUT_S,
    PIPELINES,
    ROOT,
    SWEEP_TIMEOUT_S,
    Contender,
    cell,
    cross_fitted,
    describe,
    fetch_reference,
    machine_line,
    settings_of,
    workspace,
    write_config,
)

GOAL_AGREE = 0.8
GOAL_COVERAGE = 0.90
GOAL_PICK = 0.97
GOAL_TIME_RATIO = 1.3
RUNS, RUNS_QUICK = 5, 3
ROUNDS, ROUNDS_QUICK = 6, 4
MIN_COUNTED_S = 3.0  # batches a plain-loop process counts, at the fastest throughput any run measured
BOOTSTRAP = 2000
LOG_TAIL = 15

DEMO = ROOT / "configs" / "demo.yaml"
DEFAULT_PIPELINES = ("demo", "cnn", "io", "cpu", "mixed", "saturated-text")
KNOWN_PIPELINES = ("demo", *PIPELINES)
KEYS = ("num_workers", "prefetch_factor", "persistent_workers", "pin_memory")
NUMBERS = ("throughput", "throughput_lo", "throughput_hi", "repeats", "dataset_len")
# Set beside the demo's loader block in the head to head: with the loader's other settings, near its
# picks, and what a user who reads the demo's table would try.
DEMO_NAMED = ({"num_workers": 2, "prefetch_factor": 1, "persistent_workers": True},
              {"num_workers": 2, "persistent_workers": True})

Key = tuple


def key_of(settings: dict[str, Any]) -> Key:
    """A config by its settings, as DataLoader applies them (no worker-only settings without workers)."""
    s = settings_of(settings)
    return tuple(s[k] for k in KEYS)


def loop_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """The settings given to plain_loop.py over the config's loader block (batch_size stays the loader's)."""
    s = settings_of(settings)
    return {k: s[k] for k in KEYS if s[k] is not None}


@dataclass
class Row:
    """A CSV row with status ok: one config's figures in one run."""

    trial: str
    settings: dict[str, Any]
    throughput: float
    lo: float | None
    hi: float | None
    repeats: int
    dataset_len: int | None


@dataclass
class SweepRun:
    """One default sweep: its wall time and what it answered, or why it failed."""

    label: str
    seconds: float
    error: str | None = None
    pick: dict[str, Any] | None = None
    equal: list[dict[str, Any]] = field(default_factory=list)
    decided: bool | None = None
    rows: dict[Key, Row] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def pick_key(self) -> Key | None:
        return key_of(self.pick) if self.pick is not None else None

    @property
    def answer(self) -> set[Key]:
        """The pick and the configs the run called equal to it."""
        if self.pick is None:
            return set()
        return {self.pick_key, *(key_of(e) for e in self.equal)}

    @property
    def fastest(self) -> Row | None:
        return max(self.rows.values(), key=lambda r: r.throughput, default=None)


@dataclass
class Coverage:
    """Pairs of runs and configs whose second throughput lies inside the first's interval."""

    inside: int = 0
    pairs: int = 0
    no_interval: int = 0
    outside_by_config: dict[Key, int] = field(default_factory=dict)

    def add(self, other: Coverage) -> None:
        self.inside += other.inside
        self.pairs += other.pairs
        self.no_interval += other.no_interval

    @property
    def share(self) -> float | None:
        return self.inside / self.pairs if self.pairs else None


@dataclass
class PickJudged:
    """One run's pick head to head: pick / best per round, and the split estimate; when the pick
    changes the baseline (`change`), pick / baseline per round and its interval."""

    run: str
    pick: dict[str, Any] | None
    ratios: list[float]
    split: list[float]
    interval: tuple[float, float] | None
    change: bool = False
    over_baseline: list[float] = field(default_factory=list)
    baseline_interval: tuple[float, float] | None = None

    @property
    def median(self) -> float | None:
        return statistics.median(self.ratios) if self.ratios else None

    @property
    def shown_faster(self) -> bool:
        """The pick keeps the baseline, or is shown faster than it: its 90% interval above 1."""
        return not self.change or (self.baseline_interval is not None and self.baseline_interval[0] > 1.0)


@dataclass
class PipelineResult:
    """One pipeline's sweeps (this version's and the reference's) and what they showed."""

    name: str
    runs: list[SweepRun]
    refs: list[SweepRun]
    agreeing: int
    coverage: Coverage
    judged: list[PickJudged]

    @property
    def failed(self) -> list[SweepRun]:
        return [r for r in (*self.runs, *self.refs) if not r.ok]

    def mean_seconds(self, runs: list[SweepRun]) -> float | None:
        done = [r.seconds for r in runs if r.ok]
        return statistics.mean(done) if done else None

    @property
    def time_ratio(self) -> float | None:
        now, ref = self.mean_seconds(self.runs), self.mean_seconds(self.refs)
        return now / ref if now is not None and ref else None


# The sweeps.

def log_tail(path: Path) -> str:
    lines = path.read_text(errors="replace").splitlines() if path.exists() else []
    return "\n".join(lines[-LOG_TAIL:])


def equal_settings(entry: Any, by_trial: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """A config of the summary's `equal`: an object with its settings, or a trial name found in the CSV."""
    if isinstance(entry, dict):
        return entry if "num_workers" in entry else by_trial.get(entry.get("trial"))
    return by_trial.get(entry)


def read_csv(path: Path) -> tuple[dict[Key, Row], dict[str, dict[str, Any]]]:
    """The rows with status ok by config (the ideal row left out: it feeds the step from memory), and
    every row's settings by trial name."""
    rows: dict[Key, Row] = {}
    by_trial: dict[str, dict[str, Any]] = {}
    with open(path, newline="") as f:
        for raw in csv.DictReader(f):
            r = {k: cell(v) if k in KEYS or k in NUMBERS else v for k, v in raw.items()}
            by_trial[r["trial"]] = r
            if r["status"] != "ok" or r["trial"] == "ideal" or r["throughput"] is None:
                continue
            # An older version's CSV (the reference's: only timed) may lack the interval or counts.
            row = Row(r["trial"], settings_of(r), float(r["throughput"]), r.get("throughput_lo"),
                      r.get("throughput_hi"), int(r.get("repeats") or 1), r.get("dataset_len"))
            key = key_of(r)
            # The same config under two names (a trial that advice asked for, say): the one with more repeats.
            if key not in rows or row.repeats > rows[key].repeats:
                rows[key] = row
    return rows, by_trial


def run_sweep(label: str, code: Path, config: Path, out: Path) -> SweepRun:
    """`python -m loadtune sweep CONFIG --json --out OUT` with the loadtune under `code`, run from that tree's
    root, timed from outside; its JSON summary and log are kept beside the CSV."""
    summary_path, log = out.with_suffix(".json"), out.with_suffix(".log")
    out.unlink(missing_ok=True)  # a CSV left by an earlier run in --keep DIR is not this sweep's
    env = {**os.environ, "PYTHONPATH": str(code)}
    cmd = [sys.executable, "-m", "loadtune", "sweep", str(config), "--json", "--out", str(out)]
    start = time.perf_counter()
    try:
        with open(summary_path, "w") as stdout, open(log, "w") as stderr:
            proc = subprocess.run(cmd, cwd=code, env=env, stdout=stdout, stderr=stderr, timeout=SWEEP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return SweepRun(label, time.perf_counter() - start, f"timed out after {SWEEP_TIMEOUT_S} s\n{log_tail(log)}")
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        return SweepRun(label, seconds, f"exit {proc.returncode}: {' '.join(cmd)}\n{log_tail(log)}")
    try:
        summary = json.loads(summary_path.read_text())
        rows, by_trial = read_csv(out)
    except (OSError, ValueError, KeyError) as exc:
        return SweepRun(label, seconds, f"unreadable output ({exc!r})\n{log_tail(log)}")
    equal = [s for s in (equal_settings(e, by_trial) for e in summary.get("equal") or []) if s is not None]
    return SweepRun(label, seconds, None, summary.get("recommended"), equal, summary.get("decided"), rows)


def sweep_all(name: str, index: int, config: Path, work: Path, runs: int,
              reference: Path | None) -> tuple[list[SweepRun], list[SweepRun]]:
    """The runs of this version, and of the reference when given, alternating which goes first from run
    to run and from pipeline to pipeline, so slow drift of the machine favours neither."""
    now: list[SweepRun] = []
    refs: list[SweepRun] = []
    for k in range(1, runs + 1):
        order = [("run", ROOT, now)] + ([("ref", reference, refs)] if reference is not None else [])
        for kind, code, into in order if (k + index) % 2 == 1 else order[::-1]:
            label = f"{kind}{k}"
            found = run_sweep(label, code, config, work / f"{name}-{label}.csv")
            into.append(found)
            state = "failed" if not found.ok else f"pick {describe(found.pick)}"
            print(f"  {label}: {found.seconds:.0f} s, {state}", flush=True)
            if not found.ok:
                print("    " + found.error.replace("\n", "\n    "), flush=True)
    return now, refs


# Pick repeatability and interval coverage.

def agreement(runs: list[SweepRun]) -> tuple[int, SweepRun | None]:
    """The most runs whose pick is one run's pick or a config that run called equal, and that run."""
    best, which = 0, None
    for a in runs:
        n = sum(1 for b in runs if b.pick_key is not None and b.pick_key in a.answer)
        if n > best:
            best, which = n, a
    return best, which


def coverage(runs: list[SweepRun]) -> Coverage:
    """Over ordered pairs of runs (i, j) and configs measured in both: run j's throughput in run i's interval."""
    found = Coverage()
    done = [r for r in runs if r.ok]
    for i in done:
        for j in done:
            if i is j:
                continue
            for key in i.rows.keys() & j.rows.keys():
                a, b = i.rows[key], j.rows[key]
                if a.lo is None or a.hi is None:
                    found.no_interval += 1
                    continue
                found.pairs += 1
                if a.lo <= b.throughput <= a.hi:
                    found.inside += 1
                else:
                    found.outside_by_config[key] = found.outside_by_config.get(key, 0) + 1
    return found


# Head to head over whole epochs.

def epochs_for(runs: list[SweepRun]) -> int:
    """The fewest whole epochs that count MIN_COUNTED_S at the fastest throughput any run measured."""
    rows = [r for run in runs for r in run.rows.values() if r.dataset_len]
    if not rows:
        return 3
    fastest = max(rows, key=lambda r: r.throughput)
    return max(1, math.ceil(MIN_COUNTED_S * fastest.throughput / fastest.dataset_len))


def baseline_of(config: Path) -> dict[str, Any]:
    """The config's baseline: its loader block's settings, DataLoader's defaults where it sets none."""
    loader = yaml.safe_load(config.read_text()).get("loader") or {}
    return {k: loader.get(k) for k in KEYS}


def candidates(name: str, config: Path, runs: list[SweepRun]) -> list[Contender]:
    """Every run's pick, every config a run called equal, each run's fastest row, the baseline (and
    for the demo the named configs), one contender per config, labelled with every role it has."""
    found: list[Contender] = []

    def add(label: str, settings: dict[str, Any]) -> None:
        for c in found:
            if key_of(c.settings) == key_of(settings):
                c.labels.append(label)
                return
        found.append(Contender([label], loop_settings(settings)))

    done = [r for r in runs if r.ok]
    for r in done:
        if r.pick is not None:
            add(f"pick {r.label}", r.pick)
    for r in done:
        for e in r.equal:
            add(f"equal {r.label}", e)
    for r in done:
        if r.fastest is not None:
            add(f"fastest {r.label}", r.fastest.settings)
    add("baseline", baseline_of(config))
    if name == "demo":
        for named in DEMO_NAMED:
            add("named", {**baseline_of(config), **named})
    return found


def roles(labels: list[str]) -> str:
    """'pick run1', 'pick run2', 'fastest run1' as 'pick 1,2; fastest 1'."""
    grouped: dict[str, list[str]] = {}
    for label in labels:
        role, _, run = label.partition(" ")
        grouped.setdefault(role, []).append(run.removeprefix("run"))
    return "; ".join(f"{role} {','.join(n for n in runs if n)}".rstrip() for role, runs in grouped.items())


def plain_epochs(config: Path, settings: dict[str, Any], epochs: int, log: Path,
                 tag: dict[str, Any]) -> dict[str, Any] | None:
    """plain_loop.py over whole epochs in a fresh process: its JSON line, or None when it failed.
    Every result (or failure) is appended to `log` with `tag` (the round and the candidate)."""
    cmd = [sys.executable, str(BENCH / "plain_loop.py"), str(config), json.dumps(settings), "--epochs", str(epochs)]
    entry: dict[str, Any] = {**tag, "settings": settings, "epochs": epochs}
    try:
        proc = subprocess.run(cmd, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                              timeout=LOOP_TIMEOUT_S)
        if proc.returncode == 0:
            entry["result"] = json.loads(proc.stdout.strip().splitlines()[-1])
        else:
            entry["error"] = f"exit {proc.returncode}: " + "\n".join(proc.stderr.strip().splitlines()[-LOG_TAIL:])
    except subprocess.TimeoutExpired:
        entry["error"] = f"timed out after {LOOP_TIMEOUT_S} s"
    with open(log, "a") as f:
        f.write(json.dumps(entry) + "\n")
    if "error" in entry:
        print(f"    plain loop failed: {describe(settings)}: {entry['error'].splitlines()[-1:]}", flush=True)
        return None
    return entry["result"]


def head_to_head(config: Path, contenders: list[Contender], rounds: int, epochs: int, log: Path) -> list[float]:
    """Every contender once per round, each a fresh process, in alternating order (A B C, C B A, ...)
    so slow drift of the machine favours none; the counted seconds of every process."""
    counted = []
    for r in range(rounds):
        for c in contenders if r % 2 == 0 else contenders[::-1]:
            result = plain_epochs(config, c.settings, epochs, log, {"round": r + 1, "candidate": roles(c.labels)})
            c.runs.append(float(result["samples_per_s"]) if result else None)
            if result:
                counted.append(float(result["seconds"]))
    return counted


def bootstrap_median(values: list[float], level: float = 0.90, seed: int = 0) -> tuple[float, float] | None:
    """A `level` percentile-bootstrap interval for the median of `values` (resampled with replacement)."""
    if len(values) < 2:
        return None
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(BOOTSTRAP))
    tail = (1 - level) / 2
    return medians[int(tail * BOOTSTRAP)], medians[min(BOOTSTRAP - 1, int((1 - tail) * BOOTSTRAP))]


def per_round(a: Contender, b: Contender) -> list[float]:
    """a / b in each round where both ran."""
    return [x / y for x, y in zip(a.runs, b.runs) if x is not None and y]


def judge_picks(runs: list[SweepRun], contenders: list[Contender], best: Contender,
                baseline: dict[str, Any]) -> list[PickJudged]:
    """Each run's pick against the best, and, when it changes the baseline, against the baseline."""
    by_key = {key_of(c.settings): c for c in contenders}
    kept = by_key.get(key_of(baseline))
    judged = []
    for run in runs:
        c = by_key.get(run.pick_key) if run.pick_key is not None else None
        change = run.pick_key is not None and run.pick_key != key_of(baseline)
        if c is None:
            judged.append(PickJudged(run.label, run.pick, [], [], None, change))
            continue
        ratios = per_round(c, best)
        over = per_round(c, kept) if change and kept is not None else []
        judged.append(PickJudged(run.label, run.pick, ratios, cross_fitted(c, contenders), bootstrap_median(ratios),
                                 change, over, bootstrap_median(over)))
    return judged


# The report.

def fmt(value: float | None, spec: str = ".3f") -> str:
    return "n/a" if value is None else format(value, spec)


def print_runs(runs: list[SweepRun], refs: list[SweepRun]) -> None:
    print(f"  {'run':<6} {'sweep s':>7}  {'decided':<7}  {'pick':<58} {'equal':>5}  fastest row (samples/s)")
    for r in (*runs, *refs):
        if not r.ok:
            print(f"  {r.label:<6} {r.seconds:7.1f}  failed: {r.error.splitlines()[-1]}")
            continue
        if r.label.startswith("ref"):
            print(f"  {r.label:<6} {r.seconds:7.1f}  (reference version: timed only)")
            continue
        decided = {True: "yes", False: "no"}.get(r.decided, "-")
        fastest = r.fastest
        fast = f"{describe(fastest.settings)} ({fastest.throughput:.1f})" if fastest else "none"
        print(f"  {r.label:<6} {r.seconds:7.1f}  {decided:<7}  {describe(r.pick):<58} {len(r.equal):5d}  {fast}")


def print_coverage(found: Coverage) -> None:
    outside = sorted(found.outside_by_config.items(), key=lambda kv: -kv[1])[:3]
    worst = ", ".join(f"{describe(dict(zip(KEYS, k)))} ({n})" for k, n in outside) or "none"
    print(f"  run j's throughput inside run i's interval: {fmt(found.share)} ({found.inside} of {found.pairs} "
          f"pairs of runs and configs; {found.no_interval} without an interval); outside most often: {worst}")


def print_head_to_head(contenders: list[Contender], best: Contender, epochs: int, rounds: int,
                       counted: list[float], seconds: float) -> None:
    shortest = f"{min(counted):.1f}" if counted else "n/a"
    print(f"  head to head (plain loop, {epochs} whole epoch(s) counted after one uncounted, {rounds} rounds of "
          f"{len(contenders)} fresh processes, alternating, {seconds:.0f} s; counted {shortest} s at the "
          f"shortest): median samples/s")
    for c in contenders:
        runs = " ".join(f"{v:.0f}" if v is not None else "-" for v in c.runs)
        mark = "  <- best" if c is best else ""
        print(f"    {roles(c.labels):<30} {describe(c.settings):<58} {c.median():8.1f}  [{runs}]{mark}")


def interval_text(interval: tuple[float, float] | None) -> str:
    return f"({interval[0]:.3f}, {interval[1]:.3f})" if interval else "(n/a)"


def baseline_text(j: PickJudged) -> str:
    """The pick against the baseline: kept, or pick / baseline with its interval and whether that shows it faster."""
    if not j.change:
        return "the baseline"
    if not j.over_baseline:
        return "/ baseline n/a: not shown faster"
    shown = "shown faster" if j.shown_faster else "NOT shown faster"
    return f"/ baseline {statistics.median(j.over_baseline):.3f} {interval_text(j.baseline_interval)}: {shown}"


def print_judged(judged: list[PickJudged]) -> None:
    print("  pick / best head to head, per run: median [range over rounds] (90% bootstrap); split estimate; "
          "pick / baseline median (90% bootstrap)")
    for j in judged:
        if not j.ratios:
            print(f"    {j.run:<6} {describe(j.pick):<58} n/a; {baseline_text(j)}")
            continue
        split = fmt(statistics.median(j.split) if j.split else None)
        print(f"    {j.run:<6} {describe(j.pick):<58} {j.median:.3f} [{min(j.ratios):.3f}, {max(j.ratios):.3f}] "
              f"{interval_text(j.interval)}; split {split}; {baseline_text(j)}")


def bench_pipeline(name: str, index: int, work: Path, runs: int, rounds: int, epochs: int | None,
                   reference: Path | None, quick: bool) -> PipelineResult:
    if name == "demo":
        config = DEMO  # swept from the repo, as a user sweeps it; the copy is for the record
        shutil.copy(DEMO, work / DEMO.name)
    else:
        config = write_config(work, name, PIPELINES[name], quick)
    about = "configs/demo.yaml as it is" if name == "demo" else PIPELINES[name]["about"]
    print(f"\n{name}: {about}", flush=True)
    now, refs = sweep_all(name, index, config, work, runs, reference)
    print_runs(now, refs)

    agreeing, which = agreement(now)
    answer = f"{which.label}'s pick, {describe(which.pick)}, and the {len(which.equal)} config(s) it called equal" \
        if which else "no run picked"
    print(f"  most runs agreeing with one run's answer: {agreeing} of {len(now)} ({answer})")
    found = coverage(now)
    print_coverage(found)

    judged: list[PickJudged] = []
    contenders = candidates(name, config, now)
    if contenders:
        e = epochs or epochs_for(now)
        start = time.perf_counter()
        counted = head_to_head(config, contenders, rounds, e, work / f"{name}-plain.jsonl")
        best = max(contenders, key=lambda c: c.median())
        print_head_to_head(contenders, best, e, rounds, counted, time.perf_counter() - start)
        judged = judge_picks(now, contenders, best, baseline_of(config))
        print_judged(judged)
    else:
        print("  head to head: no candidates (no sweep completed)")

    result = PipelineResult(name, now, refs, agreeing, found, judged)
    mean_now, mean_ref = result.mean_seconds(now), result.mean_seconds(refs)
    line = f"  default sweep wall time: mean {fmt(mean_now, '.1f')} s"
    if reference is not None:
        line += f", reference {fmt(mean_ref, '.1f')} s: ratio {fmt(result.time_ratio, '.2f')}"
    print(line, flush=True)
    return result


def check_picks(results: list[PipelineResult], goals: Goals) -> None:
    """The goals on the picks head to head: each >= GOAL_PICK of the best; none that changes the
    baseline without being shown faster than it."""
    picks = [(r.name, j) for r in results for j in r.judged]
    low = [(n, j) for n, j in picks if j.median is None or j.median < GOAL_PICK]
    missing = [r.name for r in results if len(r.judged) < len(r.runs)]
    medians = [j.median for _, j in picks]
    lowest = None if not picks or missing or None in medians else min(m for m in medians if m is not None)
    figures = ", ".join(f"{r.name} {fmt(min((j.median for j in r.judged if j.median is not None), default=None))}"
                        for r in results)
    below = ", ".join(f"{n} {j.run}" for n, j in low)
    goals.check("every run's pick / the best head to head, lowest", lowest, ">=", GOAL_PICK,
                detail=f" (lowest per pipeline: {figures}" + (f"; below: {below}" if low else "")
                       + (f"; not judged: {', '.join(missing)}" if missing else "") + ")")

    unshown = ", ".join(f"{n} {j.run}" for n, j in picks if not j.shown_faster)
    changes = ", ".join(f"{r.name} {sum(1 for j in r.judged if j.change)} of {len(r.judged)}" for r in results)
    goals.check("picks that change the baseline without being shown faster than it head to head",
                sum(1 for _, j in picks if not j.shown_faster), "<=", 0, spec="d",
                detail=f" (picks that change it: {changes}" + (f"; not shown: {unshown}" if unshown else "") + ")")


def print_goals(results: list[PipelineResult], ref_commit: str | None, goals: Goals | None = None) -> Goals:
    """The goals block: each goal checked and printed."""
    goals = goals if goals is not None else Goals()

    agree = [(r.name, r.agreeing, len(r.runs)) for r in results]
    shares = [a / n if n else None for _, a, n in agree]
    figures = ", ".join(f"{m} {a}/{n}" for m, a, n in agree)
    goals.check("the same pick or a called tie, lowest share of the runs over the pipelines",
                None if not shares or None in shares else min(s for s in shares if s is not None), ">=", GOAL_AGREE,
                spec=".2f", detail=f" ({figures})")

    total = Coverage()
    for r in results:
        total.add(r.coverage)
    per = ", ".join(f"{r.name} {fmt(r.coverage.share)}" for r in results)
    goals.check("run j's throughput inside run i's interval, share of the pairs", total.share, ">=", GOAL_COVERAGE,
                detail=f" (over {total.pairs} pairs; {per})")

    check_picks(results, goals)

    if ref_commit is None:
        print(f"default sweep <= {GOAL_TIME_RATIO}x the reference's: not checked (no --reference-ref); "
              f"mean wall time: " + ", ".join(f"{r.name} {fmt(r.mean_seconds(r.runs), '.1f')} s" for r in results))
    else:
        ratios = [(r.name, r.time_ratio) for r in results]
        known = [t for _, t in ratios]
        figures = ", ".join(f"{n} {fmt(t, '.2f')}" for n, t in ratios)
        goals.check(f"default sweep / the reference's ({ref_commit}), highest over the pipelines",
                    None if not known or None in known else max(t for t in known if t is not None), "<=",
                    GOAL_TIME_RATIO, spec=".2f", detail=f" ({figures})")

    failed = [f"{r.name} {s.label}" for r in results for s in r.failed]
    goals.check("sweeps that did not complete", len(failed), "<=", 0, spec="d",
                detail=f" ({', '.join(failed) or 'none failed'})")
    return goals


def pipeline_names(parser: argparse.ArgumentParser, text: str) -> list[str]:
    names = list(KNOWN_PIPELINES) if text == "all" else [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in KNOWN_PIPELINES]
    if unknown:
        parser.error(f"unknown pipeline(s) {', '.join(unknown)}; known: {', '.join(KNOWN_PIPELINES)}")
    return names


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pipelines", default=",".join(DEFAULT_PIPELINES),
                        help=f"comma-separated, of {', '.join(KNOWN_PIPELINES)}, or all "
                             f"(default {','.join(DEFAULT_PIPELINES)})")
    parser.add_argument("--runs", type=int, default=None, help=f"default sweeps per pipeline (default {RUNS}, "
                                                               f"--quick {RUNS_QUICK})")
    parser.add_argument("--rounds", type=int, default=None, help=f"head-to-head rounds (default {ROUNDS}, "
                                                                 f"--quick {ROUNDS_QUICK})")
    parser.add_argument("--epochs", type=int, default=None,
                        help=f"whole epochs a plain-loop process counts (default: enough for {MIN_COUNTED_S:g} s)")
    parser.add_argument("--reference-ref", default=None, help="git commit or ref whose default sweep to time against")
    parser.add_argument("--keep", type=Path, default=None, help="keep configs, CSVs, JSON, logs in this folder")
    parser.add_argument("--quick", action="store_true", help="recommend.py's quick sweep space, fewer runs and rounds")
    args = parser.parse_args()
    names = pipeline_names(parser, args.pipelines)
    runs = args.runs or (RUNS_QUICK if args.quick else RUNS)
    rounds = args.rounds or (ROUNDS_QUICK if args.quick else ROUNDS)
    if runs < 2:
        parser.error("--runs must be 2 or more: repeatability needs two runs to compare")

    started = time.perf_counter()
    scratch, work = workspace(args.keep, "loadtune-repeatability-")
    results = []
    try:
        reference, ref_commit = None, None
        if args.reference_ref:
            reference = scratch / "reference"
            ref_commit = fetch_reference(args.reference_ref, reference)
        print(machine_line())
        print(f"{runs} default sweeps per pipeline, {rounds} head-to-head rounds; files in {work}")
        if reference is not None:
            print(f"reference version: {ref_commit} (git archive, run with PYTHONPATH={reference})")
        for i, name in enumerate(names):
            results.append(bench_pipeline(name, i, work, runs, rounds, args.epochs, reference, args.quick))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    print()
    goals = print_goals(results, ref_commit)
    print(f"total {time.perf_counter() - started:.0f} s")
    return goals.exit_status()


if __name__ == "__main__":
    sys.exit(main())
