"""How good loadtune's pick is, measured head to head by a plain loop, and what its sweep costs.

Pipelines with different bottlenecks, each swept over num_workers [0, 1, 2, 3, 4, 6],
prefetch_factor [1, 2, 4] and persistent_workers [false, true], on the CPU. Every dataset
holds 50 batches and measure.epoch_batches is 50, so each window of 50 counted batches
crosses exactly one epoch start (where persistent_workers shows), at the dataset's end as in
training (no batches left in flight for persistent workers to finish and throw away):
  cnn:    a small CNN trained on the CPU each step (forward, backward, SGD, one intra-op
          thread), batch 64, fed by a read wait and a numpy augmentation per sample
          (benchmarks/pipelines.py); baseline: the DataLoader defaults (batch_size only, so
          num_workers=0);
  io:     each sample sleeps (I/O-like, latency-bound): more workers than cores help;
  cpu:    each sample burns CPU (decode-like): the cores cap what workers can do;
  mixed:  a little CPU and a little waiting, every 7th sample 8x slower (prefetch depth matters);
  images: (only when named) the demo's JPEG files (loadtune.demo) decoded, cropped and flipped
          by torchvision.
The others start from num_workers=1, prefetch_factor=2, with an 8-15 ms sleep as the step.
For each pipeline:
  1. the default sweep (`loadtune sweep CONFIG`: default strategy, repeats, batches and
     warm-up), timed, with the code here and with a reference version (--reference-ref,
     default 49c7878, whose default was ofat: its tree from `git archive`, run with PYTHONPATH pointing at it), the
     two in alternating order over the pipelines;
  2. a grid sweep (`--strategy grid --repeats 1`, by the reference version, so the candidates
     come alike before and after a change) for the grid's top 3 by throughput;
  3. head to head: the pick, the reference version's pick (not with --quick) and the grid's
     top 3, each run by benchmarks/plain_loop.py (a plain DataLoader loop, nothing of
     loadtune: same warm-up, batches and epochs as the sweep) in a fresh process, in rounds
     of alternating order (A B C, C B A, ...). The grid's best figure is the best of many
     noisy ones (the winner's curse), so the best is whichever of the top 3 is fastest head
     to head (by median); pick quality is the median over rounds of pick / best, with the
     range of those ratios. The highest of several head-to-head medians carries the same
     curse, on a smaller scale, against the pick: also printed, the same ratio with the best
     chosen on the odd rounds and judged on the even ones, and the other way round.
Goals:
  pick quality >= 0.98 of the best, head to head, on every pipeline;
  the default sweep <= 0.5x the reference version's default sweep of the same config, at that
  pick quality;
  no swept key ends `skipped` when the sweep measured a worker count that makes it valid: a
  prefetch_factor or persistent_workers row that did not run, its value measured with workers
  nowhere in the sweep;
  decided on at least three of the pipelines (all, with fewer), at most measure.repeats
  processes a trial.
Exits 1 when any goal is missed.
Sweeps run through the command line (`python -m loadtune sweep ... --json`) and are read from
its JSON summary and CSV only. About 25 minutes on 2 cores; --quick (num_workers [0, 2, 4],
4 rounds instead of 6) about 12.

    python benchmarks/recommend.py [--quick] [--pipelines cnn,io|all] [--reference-ref REF]
                                   [--rounds N] [--keep DIR]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(BENCH))

from _common import Goals  # noqa: E402
from pipelines import PIPELINES as STEP_PIPELINES  # noqa: E402

from loadtune.measure.machine import cpu_model, usable_cores  # noqa: E402

GOAL_QUALITY = 0.98
GOAL_TIME_RATIO = 0.5
REFERENCE_REF = "49c7878"  # the last default sweep before the pipeline model: ofat
SETTING_KEYS = ("num_workers", "prefetch_factor", "persistent_workers", "pin_memory", "batch_size")
WORKER_KEYS = ("prefetch_factor", "persistent_workers")
TOP = 3
SWEEP_TIMEOUT_S = 1800
LOOP_TIMEOUT_S = 300

EPOCH_BATCHES = 50  # one epoch start in every window of 50 batches, wherever the window starts

# Each dataset holds exactly EPOCH_BATCHES batches: an epoch ends at the dataset's end.
PIPELINES: dict[str, dict[str, Any]] = {
    "cnn": {
        "about": "small CNN trained on the CPU (1 thread) per batch of 64; per sample a 0.3 ms read wait and "
                 "about 0.5 ms of numpy augmentation; baseline: DataLoader defaults",
        "dataset": {"factory": str(BENCH / "pipelines.py:augmented_images"),
                    "kwargs": {"num_samples": 64 * EPOCH_BATCHES, "passes": 2, "read_s": 0.0003}},
        "loader": {"batch_size": 64},
        "step": {"factory": str(BENCH / "pipelines.py:make_cnn_step"), "kwargs": {"width": 8, "threads": 1}},
    },
    "io": {
        "about": "1.3 ms sleep per sample (latency-bound), batch 16, 8 ms sleep step",
        "dataset": {"factory": "loadtune.synthetic:sleep_cost",
                    "kwargs": {"num_samples": 16 * EPOCH_BATCHES, "cost_s": 0.0013}},
        "loader": {"batch_size": 16, "shuffle": True, "num_workers": 1, "prefetch_factor": 2},
        "step": {"sleep_s": 0.008},
    },
    "cpu": {
        "about": "0.6 ms CPU burn per sample (decode-like), batch 16, 8 ms sleep step",
        "dataset": {"factory": "loadtune.synthetic:cpu_cost",
                    "kwargs": {"num_samples": 16 * EPOCH_BATCHES, "cost_s": 0.0006}},
        "loader": {"batch_size": 16, "shuffle": True, "num_workers": 1, "prefetch_factor": 2},
        "step": {"sleep_s": 0.008},
    },
    "images": {
        "about": "demo JPEGs (96-192 px) decoded, cropped to 64 px, flipped, normalised; batch 16, 15 ms sleep step",
        "dataset": {"factory": "loadtune.demo:synthetic_images",
                    "kwargs": {"num_images": 16 * EPOCH_BATCHES, "crop_px": 64, "min_px": 96, "max_px": 192}},
        "loader": {"batch_size": 16, "shuffle": True, "num_workers": 1, "prefetch_factor": 2},
        "step": {"sleep_s": 0.015},
    },
    "mixed": {
        "about": "0.2 ms CPU + 0.4 ms wait per sample, every 7th 8x slower; batch 16, 8 ms sleep step",
        "dataset": {"factory": "loadtune.synthetic:mixed_cost",
                    "kwargs": {"num_samples": 16 * EPOCH_BATCHES, "cpu_s": 0.0002, "sleep_s": 0.0004,
                               "slow_every": 7, "slow_factor": 8.0}},
        "loader": {"batch_size": 16, "shuffle": True, "num_workers": 1, "prefetch_factor": 2},
        "step": {"sleep_s": 0.008},
    },
}

# The CPU-step pipeline of benchmarks/pipelines.py (a small CNN on torch's own intra-op threads), by name.
PIPELINES.update(STEP_PIPELINES)

DEFAULT_PIPELINES = ("cnn", "io", "cpu", "mixed")  # images, cnn-threads: by name, or --pipelines all

SWEEP = {"num_workers": [0, 1, 2, 3, 4, 6], "prefetch_factor": [1, 2, 4], "persistent_workers": [False, True]}
SWEEP_QUICK = {"num_workers": [0, 2, 4], "prefetch_factor": [1, 2, 4], "persistent_workers": [False, True]}
ROUNDS, ROUNDS_QUICK = 6, 4
GRID_REPEATS, GRID_REPEATS_QUICK = 1, 1


@dataclass
class Sweep:
    seconds: float
    summary: dict[str, Any]
    rows: list[dict[str, Any]]

    @property
    def pick(self) -> dict[str, Any] | None:
        return self.summary.get("recommended")


@dataclass
class Contender:
    labels: list[str]
    settings: dict[str, Any]
    runs: list[float | None] = field(default_factory=list)

    @property
    def label(self) -> str:
        return " = ".join(self.labels)

    def median(self) -> float:
        done = [v for v in self.runs if v is not None]
        return statistics.median(done) if done else 0.0


def machine_line() -> str:
    return (f"machine: {cpu_model()}, {usable_cores()} usable cores, Python {platform.python_version()}, "
            f"torch {version('torch')}")


def cell(value: str) -> Any:
    """A CSV cell as the value it stands for (empty: None)."""
    return None if value == "" else yaml.safe_load(value)


def settings_of(row: dict[str, Any]) -> dict[str, Any]:
    """The DataLoader settings a row measured, as DataLoader applies them."""
    s = {k: row.get(k) for k in SETTING_KEYS}
    s["num_workers"] = int(s["num_workers"] or 0)
    if s["num_workers"] == 0:
        s["prefetch_factor"], s["persistent_workers"] = None, False
    elif s["prefetch_factor"] is None:
        s["prefetch_factor"] = 2
    s["persistent_workers"] = bool(s["persistent_workers"])
    s["pin_memory"] = bool(s["pin_memory"])
    return s


def key_of(settings: dict[str, Any]) -> tuple:
    s = settings_of(settings)
    return tuple(s[k] for k in SETTING_KEYS)


def describe(settings: dict[str, Any] | None) -> str:
    if settings is None:
        return "none"
    s = settings_of(settings)
    text = f"num_workers={s['num_workers']}"
    if s["num_workers"]:
        text += f", prefetch_factor={s['prefetch_factor']}, persistent_workers={str(s['persistent_workers']).lower()}"
    if s["pin_memory"]:
        text += ", pin_memory=true"
    return text


def write_config(work: Path, name: str, pipeline: dict[str, Any], quick: bool) -> Path:
    config = {
        "name": f"recommend-{name}",
        "dataset": pipeline["dataset"],
        "loader": pipeline["loader"],
        "sweep": SWEEP_QUICK if quick else SWEEP,
        "step": pipeline["step"],
        "measure": {"epoch_batches": EPOCH_BATCHES, "timeout_s": 300},
        "device": "cpu",
    }
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def run_sweep(code: Path, config: Path, out: Path, extra: list[str] = ()) -> Sweep:
    """`python -m loadtune sweep` with the loadtune under `code`, timed from outside."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    cmd = [sys.executable, "-m", "loadtune", "sweep", str(config), "--out", str(out), "--json", *extra]
    log = out.with_suffix(".log")
    start = time.perf_counter()
    with open(log, "w") as err:
        proc = subprocess.run(cmd, cwd=out.parent, env=env, stdout=subprocess.PIPE, stderr=err, text=True,
                              timeout=SWEEP_TIMEOUT_S)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        tail = "".join(log.read_text().splitlines(keepends=True)[-15:])
        raise RuntimeError(f"sweep failed (exit {proc.returncode}): {' '.join(cmd)}\n{tail}")
    with open(out, newline="") as f:
        rows = [{k: cell(v) if k in SETTING_KEYS or k in ("throughput", "rank") else v for k, v in r.items()}
                for r in csv.DictReader(f)]
    return Sweep(seconds, json.loads(proc.stdout), rows)


def plain_run(config: Path, settings: dict[str, Any], one_core: bool = False) -> float | None:
    """Samples/s of the plain loop in a fresh process (on the first usable core alone with
    `one_core`), or None when it failed."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    s = settings_of(settings)
    cmd = [sys.executable, str(BENCH / "plain_loop.py"), str(config), json.dumps(s)]
    first = sorted(os.sched_getaffinity(0))[0]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=LOOP_TIMEOUT_S,
                              preexec_fn=(lambda: os.sched_setaffinity(0, {first})) if one_core else None)
    except subprocess.TimeoutExpired:
        print(f"    plain loop timed out: {describe(s)}", flush=True)
        return None
    if proc.returncode != 0:
        print(f"    plain loop failed: {describe(s)}: {proc.stderr.strip().splitlines()[-1:]}", flush=True)
        return None
    return float(json.loads(proc.stdout.strip().splitlines()[-1])["samples_per_s"])


def head_to_head(config: Path, contenders: list[Contender], rounds: int) -> None:
    """Every contender once per round, each run a fresh process; the order alternates
    (A B C, C B A, ...) so slow drift of the machine favours none."""
    for r in range(rounds):
        for c in contenders if r % 2 == 0 else contenders[::-1]:
            c.runs.append(plain_run(config, c.settings))


def cross_fitted(pick: Contender, tops: list[Contender]) -> list[float]:
    """pick / best over the head-to-head rounds, with the best chosen (highest median) on the
    other half of the rounds (odd against even), so that its own noise in the rounds it is
    chosen on does not flatter it: the winner's curse of taking the highest of several medians."""
    ratios = []
    n = len(pick.runs)
    for held in (0, 1):
        chosen_on = [r for r in range(n) if r % 2 != held]

        def median_on(c: Contender) -> float:
            done = [c.runs[r] for r in chosen_on if c.runs[r] is not None]
            return statistics.median(done) if done else 0.0

        best = max(tops, key=median_on)
        ratios += [pick.runs[r] / best.runs[r] for r in range(n) if r % 2 == held
                   and pick.runs[r] is not None and best.runs[r] is not None and best.runs[r] > 0]
    return ratios


def ended_skipped(rows: list[dict[str, Any]]) -> list[str]:
    """Rows of prefetch_factor / persistent_workers that did not run although the sweep measured
    a worker count that makes them valid, and whose value no measured row with workers had."""
    with_workers = [settings_of(r) for r in rows if r["status"] == "ok" and r["trial"] != "ideal"
                    and (r["num_workers"] or 0) > 0]
    if not with_workers:
        return []
    found = []
    for r in rows:
        if r["status"] != "skipped" or r["changed"] not in WORKER_KEYS:
            continue
        value = cell(r["value"])
        if not any(s[r["changed"]] == value for s in with_workers):
            found.append(r["trial"])
    return found


def top_rows(rows: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    ok = [r for r in rows if r["status"] == "ok" and r["trial"] != "ideal" and r["throughput"] is not None]
    return sorted(ok, key=lambda r: -r["throughput"])[:n]


def fetch_reference(ref: str, into: Path) -> str:
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", f"{ref}^{{commit}}"], check=True,
                            capture_output=True, text=True).stdout.strip()
    into.mkdir(parents=True)
    archive = subprocess.Popen(["git", "-C", str(ROOT), "archive", "--format=tar", commit], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(into)], stdin=archive.stdout, check=True)
    if archive.wait() != 0:
        raise RuntimeError(f"git archive {commit} failed")
    where = subprocess.run([sys.executable, "-c", "import loadtune; print(loadtune.__file__)"],
                           env={**os.environ, "PYTHONPATH": str(into)}, cwd=into, capture_output=True,
                           text=True, check=True).stdout.strip()
    if not Path(where).resolve().is_relative_to(into.resolve()):
        raise RuntimeError(f"the reference run would import loadtune from {where}, not from {into}")
    return commit


def fmt_ratio(values: list[float]) -> str:
    if not values:
        return "n/a"
    return f"{statistics.median(values):.3f} (pairs {min(values):.3f}-{max(values):.3f}, n={len(values)})"


def bench_pipeline(name: str, index: int, work: Path, ref_code: Path, ref_commit: str, quick: bool,
                   rounds: int) -> dict[str, Any]:
    pipeline = PIPELINES[name]
    config = write_config(work, name, pipeline, quick)
    print(f"\n{name}: {pipeline['about']}", flush=True)
    # The default sweep, both versions, in alternating order over the pipelines.
    order = [("now", ROOT), ("ref", ref_code)]
    sweeps: dict[str, Sweep] = {}
    for label, code in order if index % 2 == 0 else order[::-1]:
        sweeps[label] = run_sweep(code, config, work / f"{name}-default-{label}.csv")
    repeats = str(GRID_REPEATS_QUICK if quick else GRID_REPEATS)
    # The grid only names candidates; the reference version runs it, so they come alike whatever
    # the code here does to its strategies.
    grid = run_sweep(ref_code, config, work / f"{name}-grid.csv", ["--strategy", "grid", "--repeats", repeats])
    now, ref = sweeps["now"], sweeps["ref"]
    tops = top_rows(grid.rows, TOP)
    grid_ok = len([r for r in grid.rows if r["status"] == "ok" and r["trial"] != "ideal"])
    print(f"  grid ({ref_commit}, {grid_ok} trials, {repeats} repeat(s), {grid.seconds:.0f} s), "
          f"top {len(tops)} by throughput:")
    for i, r in enumerate(tops, 1):
        print(f"    {i}. {describe(r):<66} {r['throughput']:8.1f} samples/s")
    ranked = top_rows(grid.rows, grid_ok)

    def in_grid(pick: dict[str, Any] | None) -> str:
        place = [i for i, r in enumerate(ranked, 1) if pick is not None and key_of(r) == key_of(pick)]
        return f"grid's #{place[0]} of {len(ranked)}, {ranked[place[0] - 1]['throughput']:.1f} samples/s" \
            if place else "not in the grid"

    for label, found in (("default sweep", now), (f"reference {ref_commit}", ref)):
        trials = len([r for r in found.rows if r["status"] == "ok" and r["trial"] != "ideal"])
        trial = found.pick["trial"] if found.pick else "-"
        print(f"  {label} pick: {describe(found.pick)} ({trial}; {trials} trials; {in_grid(found.pick)})")

    contenders: list[Contender] = []

    def add(label: str, settings: dict[str, Any] | None) -> Contender | None:
        if settings is None:
            return None
        for c in contenders:
            if key_of(c.settings) == key_of(settings):
                c.labels.append(label)
                return c
        c = Contender([label], settings_of(settings))
        contenders.append(c)
        return c

    pick = add("pick", now.pick)
    ref_pick = None if quick else add(f"{ref_commit} pick", ref.pick)
    top_contenders = [add(f"grid #{i}", r) for i, r in enumerate(tops, 1)]
    start = time.perf_counter()
    head_to_head(config, contenders, rounds)
    h2h_s = time.perf_counter() - start
    best = max(top_contenders, key=lambda c: c.median())
    print(f"  head to head (plain loop, {rounds} rounds of {len(contenders)} fresh processes, alternating order, "
          f"{h2h_s:.0f} s): median samples/s")
    for c in contenders:
        runs = " ".join(f"{v:.0f}" if v is not None else "-" for v in c.runs)
        mark = "  <- best" if c is best else ""
        print(f"    {c.label:<30} {describe(c.settings):<66} {c.median():8.1f}  [{runs}]{mark}")

    def ratios(c: Contender | None) -> list[float]:
        if c is None:
            return []
        return [a / b for a, b in zip(c.runs, best.runs) if a is not None and b is not None and b > 0]

    quality, ref_quality = ratios(pick), ratios(ref_pick)
    crossed = cross_fitted(pick, top_contenders) if pick is not None else []
    print(f"  pick / best head to head: {fmt_ratio(quality)}")
    print(f"  pick / best, the best chosen on the other half of the rounds: {fmt_ratio(crossed)}")
    if ref_pick is not None and ref_pick is not pick:
        print(f"  {ref_commit} pick / best head to head: {fmt_ratio(ref_quality)}")
    time_ratio = now.seconds / ref.seconds
    print(f"  default sweep wall time: {now.seconds:.1f} s now, {ref.seconds:.1f} s with {ref_commit}: "
          f"ratio {time_ratio:.2f}")
    skipped = ended_skipped(now.rows)
    print(f"  ended skipped although a measured worker count makes them valid: {', '.join(skipped) or 'none'}")
    most = max((int(r["repeats"]) for r in now.rows if r.get("status") == "ok" and r.get("repeats")), default=0)
    decided = bool(now.summary.get("decided"))
    ties = now.summary.get("ties") or []
    model = now.summary.get("model") or {}
    print(f"  default sweep: {'decided' if decided else 'not decided'}, at most {most} processes for a trial, "
          f"{len(ties)} contender(s) tied by the model and the data; model error {model.get('error')} over "
          f"{model.get('error_trials')} trial(s){', fell back to ofat' if model.get('fell_back_to_ofat') else ''}")
    return {"name": name, "decided": decided, "most_repeats": most,
            "quality": statistics.median(quality) if quality else None, "pairs": quality,
            "crossed": statistics.median(crossed) if crossed else None,
            "now_s": now.seconds, "ref_s": ref.seconds, "time_ratio": time_ratio, "skipped": skipped,
            "pick": describe(now.pick), "best": describe(best.settings)}


def pipeline_names(parser: argparse.ArgumentParser, text: str) -> list[str]:
    """The pipelines named by --pipelines (comma-separated, or all); an unknown one is an error."""
    names = list(PIPELINES) if text == "all" else [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in PIPELINES]
    if unknown:
        parser.error(f"unknown pipeline(s) {', '.join(unknown)}; known: {', '.join(PIPELINES)}")
    return names


def workspace(keep: Path | None, prefix: str) -> tuple[Path, Path]:
    """A scratch folder (removed at the end) and the folder for configs, CSVs and logs: `keep`,
    or one inside the scratch folder."""
    scratch = Path(tempfile.mkdtemp(prefix=prefix))
    work = keep.resolve() if keep else scratch / "work"
    work.mkdir(parents=True, exist_ok=True)
    return scratch, work


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer num_workers values and rounds")
    parser.add_argument("--pipelines", default=",".join(DEFAULT_PIPELINES),
                        help=f"comma-separated, of {', '.join(PIPELINES)}, or all "
                             f"(default {','.join(DEFAULT_PIPELINES)})")
    parser.add_argument("--reference-ref", default=REFERENCE_REF, help="git commit or ref to time against")
    parser.add_argument("--rounds", type=int, default=None, help="head-to-head rounds (default 6, --quick 4)")
    parser.add_argument("--keep", type=Path, default=None, help="keep configs, CSVs and logs in this folder")
    args = parser.parse_args()
    names = pipeline_names(parser, args.pipelines)
    rounds = args.rounds or (ROUNDS_QUICK if args.quick else ROUNDS)

    started = time.perf_counter()
    scratch, work = workspace(args.keep, "loadtune-recommend-")
    results = []
    try:
        ref_commit = fetch_reference(args.reference_ref, scratch / "reference")
        print(machine_line())
        print(f"reference version: {ref_commit} (git archive, run with PYTHONPATH={scratch / 'reference'})")
        for i, name in enumerate(names):
            results.append(bench_pipeline(name, i, work, scratch / "reference", ref_commit, args.quick, rounds))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    print("\npipeline  pick / best [pairs' range]       sweep now / ref (ratio)      pick -> best")
    for r in results:
        pairs = f"[{min(r['pairs']):.3f}, {max(r['pairs']):.3f}]" if r["pairs"] else ""
        quality = f"{r['quality']:.3f} {pairs}" if r["quality"] is not None else "n/a"
        print(f"{r['name']:<9} {quality:<32} {r['now_s']:5.0f} s / {r['ref_s']:4.0f} s ({r['time_ratio']:.2f})"
              f"      {r['pick']} -> {r['best']}")
    print()
    goals = check_goals(results, ref_commit)
    print(f"total {time.perf_counter() - started:.0f} s")
    return goals.exit_status()


def check_goals(results: list[dict[str, Any]], ref_commit: str, goals: Goals | None = None) -> Goals:
    """Each goal over the pipelines' results (bench_pipeline's dicts), checked and printed."""
    goals = goals if goals is not None else Goals()
    qualities = [r["quality"] for r in results]
    figures = ", ".join(f"{r['name']} {r['quality']:.3f}" if r["quality"] is not None else f"{r['name']} n/a"
                        for r in results)
    lowest = None if not results or None in qualities else min(qualities)
    quality_met = goals.check("pick / best head to head, lowest over the pipelines", lowest, ">=", GOAL_QUALITY,
                              detail=f" ({figures})")
    figures = ", ".join(f"{r['name']} {r['crossed']:.3f}" if r["crossed"] is not None else f"{r['name']} n/a"
                        for r in results)
    print(f"      the same with the best chosen on the other half of the rounds (no winner's curse): {figures}")
    total_now, total_ref = sum(r["now_s"] for r in results), sum(r["ref_s"] for r in results)
    figures = ", ".join(f"{r['name']} {r['time_ratio']:.2f}" for r in results)
    at = "" if quality_met else "; pick quality not met, so not at that quality"
    goals.check(f"default sweep / the reference's ({ref_commit}), highest over the pipelines",
                max((r["time_ratio"] for r in results), default=None), "<=", GOAL_TIME_RATIO, spec=".2f",
                detail=f" ({figures}; all {total_now:.0f} s / {total_ref:.0f} s = "
                       f"{total_now / total_ref if total_ref else float('nan'):.2f}{at})")
    skipped = [r for r in results if r["skipped"]]
    figures = "; ".join(f"{r['name']}: {', '.join(r['skipped'])}" for r in skipped) or "none"
    goals.check("swept keys ended skipped although a measured worker count makes them valid",
                sum(len(r["skipped"]) for r in results), "<=", 0, spec="d", detail=f" ({figures})")
    decided = [r["name"] for r in results if r["decided"]]
    goals.check("pipelines decided, at most measure.repeats processes a trial", len(decided), ">=",
                min(3, len(results)), spec="d",
                detail=f" (decided: {', '.join(decided) or 'none'}; most processes for a trial: "
                       f"{max((r['most_repeats'] for r in results), default=0)})")
    return goals


if __name__ == "__main__":
    sys.exit(main())
