"""The real run, watched (`loadtune.watch`): what watching costs, whether it agrees with the sweep,
and what one watched run predicts. The pipelines are benchmarks/recommend.py's (each epoch 50
batches): cnn trains a small CNN on the CPU each step; io, cpu, mixed and images have a sleep step.

overhead   io and cnn: benchmarks/watch_train.py plain (A) and the same loop watched (B,
           `--every 5`: the file written every 5 s, twelve times as often as the default), each
           run a fresh process timing 4 whole epochs after one uncounted, in rounds A B, B A, ...;
           watched / plain as the geometric mean of the rounds' ratios with its 95% t interval.
           Goal: >= 0.99 (the estimate).
agreement  cnn, io, cpu and mixed, each at its baseline: the sweep's trial of it (`loadtune sweep`
           with that config alone, 3 repeats) against a training run of 6 whole epochs watched
           (watch_train.py --watch): the watched wait ratio within 0.05 of the sweep's, its
           throughput within 10%.
predict    cpu, io, mixed and images: one watched run of the baseline (6 epochs), then `loadtune
           predict FILE --json`; its pick measured in the grid of the space the prediction covers
           (`--strategy grid`, 2 repeats a trial); where it reads below 0.95 of the grid's best,
           the two head to head (fresh plain loops, A B, B A, ...: the grid's best is the highest
           of ~30 noisy figures). Goal: pick / best >= 0.95 on at least 3 of the 4.
Exits 1 when any goal of the parts run is missed.

    python benchmarks/watch.py [--parts overhead,agreement,predict] [--rounds 8] [--keep DIR] [--reuse DIR]

About 10 minutes for overhead, 6 for agreement, 35 for predict (the grids) on 2 cores. --reuse DIR
takes the grids (and sources) an earlier --keep DIR wrote.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(BENCH))

from _common import Goals  # noqa: E402
from ranked_referee import t975  # noqa: E402
from recommend import EPOCH_BATCHES, PIPELINES, SWEEP, machine_line, plain_run, settings_of  # noqa: E402
from transfer import GOAL_PICK, key, predict  # noqa: E402

from loadtune.record.record import read_records  # noqa: E402

GOAL_OVERHEAD = 0.99
GOAL_WAIT_RATIO = 0.05  # absolute
GOAL_THROUGHPUT = 0.10  # relative
GOAL_PICKS = 3  # of the four pipelines
OVERHEAD_PIPELINES = ("io", "cnn")
AGREEMENT_PIPELINES = ("cnn", "io", "cpu", "mixed")
PREDICT_PIPELINES = ("cpu", "io", "mixed", "images")
OVERHEAD_EVERY_S = 5.0
OVERHEAD_EPOCHS = 4
WATCHED_EPOCHS = 6
SWEEP_REPEATS = 3
GRID_REPEATS = 2
RUN_TIMEOUT_S = 600


def write_config(work: Path, name: str, sweep: dict[str, list[Any]] | None = None) -> Path:
    pipeline = PIPELINES[name]
    config = {"name": f"watch-{name}", "dataset": pipeline["dataset"], "loader": pipeline["loader"],
              "sweep": sweep or {}, "step": pipeline["step"],
              "measure": {"epoch_batches": EPOCH_BATCHES, "timeout_s": 300}, "device": "cpu"}
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def baseline(name: str) -> dict[str, Any]:
    return settings_of(dict(PIPELINES[name]["loader"]))


def train(config: Path, settings: dict[str, Any], epochs: int, watch: Path | None = None,
          every_s: float = 60.0) -> float:
    """Samples/s of watch_train.py in a fresh process (watched into `watch` when given)."""
    cmd = [sys.executable, str(BENCH / "watch_train.py"), str(config), json.dumps(settings), "--epochs", str(epochs)]
    if watch is not None:
        cmd += ["--watch", str(watch), "--every", str(every_s)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=env, cwd=config.parent)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    return float(json.loads(proc.stdout.strip().splitlines()[-1])["samples_per_s"])


def sweep(config: Path, out: Path, extra: list[str]) -> None:
    cmd = [sys.executable, "-m", "loadtune", "sweep", str(config), "--out", str(out), "--json", *extra]
    with open(out.with_suffix(".log"), "w") as log, open(out.with_suffix(".json"), "w") as summary:
        subprocess.run(cmd, cwd=out.parent, stdout=summary, stderr=log, check=True, timeout=3600,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})


def ratio_interval(logs: list[float]) -> tuple[float, float, float]:
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return math.exp(mean), math.nan, math.nan
    half = t975(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


# --- overhead -------------------------------------------------------------------------------------


def overhead(work: Path, rounds: int, goals: Goals) -> None:
    for name in OVERHEAD_PIPELINES:
        config = write_config(work, name)
        settings = baseline(name)
        plain: list[float] = []
        watched: list[float] = []
        for r in range(rounds):
            order = [("A", plain, None), ("B", watched, work / f"{name}-overhead.csv")]
            for _, runs, out in order if r % 2 == 0 else order[::-1]:
                runs.append(train(config, settings, OVERHEAD_EPOCHS, out, OVERHEAD_EVERY_S))
            print(f"  {name} round {r + 1} ({'AB' if r % 2 == 0 else 'BA'}): plain {plain[-1]:.1f}, "
                  f"watched {watched[-1]:.1f} samples/s", flush=True)
        ratio, low, high = ratio_interval([math.log(b / a) for a, b in zip(plain, watched)])
        goals.check(f"overhead {name}: watched / plain", ratio, ">=", GOAL_OVERHEAD, spec=".4f",
                    detail=f" [95%: {low:.4f}, {high:.4f}] over {rounds} rounds (plain median "
                           f"{statistics.median(plain):.1f}, watched {statistics.median(watched):.1f} samples/s, "
                           f"every {OVERHEAD_EVERY_S:g} s)")


# --- agreement ------------------------------------------------------------------------------------


def agreement(work: Path, reuse: bool, goals: Goals) -> None:
    for name in AGREEMENT_PIPELINES:
        settings = baseline(name)
        config = write_config(work, name, {"num_workers": [settings["num_workers"]]})
        swept, watched_csv = work / f"{name}-alone.csv", work / f"{name}-watched.csv"
        if not (reuse and swept.exists()):
            sweep(config, swept, ["--strategy", "grid", "--repeats", str(SWEEP_REPEATS),
                                  "--set", f"measure.min_repeats={SWEEP_REPEATS}"])
        if not (reuse and watched_csv.exists()):
            train(config, settings, WATCHED_EPOCHS, watched_csv)
        trial = next(r for r in read_records(swept) if r.ran and key(settings_of(r.to_dict())) == key(settings))
        (row,) = read_records(watched_csv)
        d_wait = row.wait_ratio - trial.wait_ratio
        d_tp = row.throughput / trial.throughput - 1
        print(f"agreement {name} ({trial.trial}, {_describe(settings)}): wait ratio watched {row.wait_ratio:.3f} "
              f"sweep {trial.wait_ratio:.3f}; samples/s watched {row.throughput:.1f} sweep {trial.throughput:.1f}; "
              f"verdicts: watched {row.assessment.verdict!r}, sweep {trial.assessment.verdict!r}", flush=True)
        goals.check(f"agreement {name}: |wait ratio watched - sweep|", abs(d_wait), "<=", GOAL_WAIT_RATIO,
                    detail=f" ({d_wait:+.3f})")
        goals.check(f"agreement {name}: |samples/s watched / sweep - 1|", abs(d_tp), "<=", GOAL_THROUGHPUT,
                    detail=f" ({d_tp:+.1%})")


# --- predict --------------------------------------------------------------------------------------


def predict_part(work: Path, reuse: bool, rounds: int, goals: Goals) -> None:
    results = []
    for name in PREDICT_PIPELINES:
        settings = baseline(name)
        config = write_config(work, name, SWEEP)
        source, grid = work / f"{name}-source-watched.csv", work / f"{name}-grid.csv"
        if not (reuse and source.exists()):
            train(config, settings, WATCHED_EPOCHS, source)
        if not (reuse and grid.exists()):
            sweep(config, grid, ["--strategy", "grid", "--repeats", str(GRID_REPEATS),
                                 "--set", f"measure.min_repeats={GRID_REPEATS}"])
        out = predict(source, [])
        measured = {key(settings_of(r.to_dict())): r for r in read_records(grid)
                    if r.ran and not r.data_flagged and not r.assessment.asked_by and r.trial != "ideal"}
        space = {key(row["settings"]) for row in out["rows"]}
        measured = {k: r for k, r in measured.items() if k in space}
        best = max(measured.values(), key=lambda r: r.throughput)
        pick = out["recommended"]
        got = measured.get(key(pick["settings"]))
        share = got.throughput / best.throughput if got else None
        errors = [abs(row["predicted_throughput"] / r.throughput - 1) for row in out["rows"]
                  if (r := measured.get(key(row["settings"]))) is not None]
        result = {"pipeline": name, "pick": pick["config"], "pick_settings": pick["settings"],
                  "best": best.trial, "best_settings": settings_of(best.to_dict()), "share": share,
                  "tied": got.assessment.tied_with_best if got else None,
                  "median_error": statistics.median(errors) if errors else None, "compared": len(errors),
                  "notes": out.get("notes")}
        if share is not None and share < GOAL_PICK and rounds:
            runs: dict[str, list[float]] = {"pick": [], "best": []}
            for r in range(rounds):
                order = (("pick", pick["settings"]), ("best", result["best_settings"]))
                for who, s in order if r % 2 == 0 else order[::-1]:
                    got_s = plain_run(config, s)
                    if got_s is not None:
                        runs[who].append(got_s)
            ratio, low, high = ratio_interval([math.log(a / b) for a, b in zip(runs["pick"], runs["best"])])
            result.update(head_to_head=ratio, head_to_head_interval=(low, high), head_to_head_runs=runs)
        results.append(result)
        h = result.get("head_to_head")
        judged = h if h is not None else share
        print(f"predict {name}: from one watched run of {_describe(settings)}: pick {pick['config']} "
              f"{'-' if share is None else f'{share:.3f}'} of the grid's best ({best.trial}"
              f"{', tied' if result['tied'] else ''})"
              + (f", head to head {h:.3f} [95%: {result['head_to_head_interval'][0]:.3f}, "
                 f"{result['head_to_head_interval'][1]:.3f}]" if h is not None else "")
              + f"; median |predicted/measured - 1| {result['median_error']:.3f} over {len(errors)}: "
              + ("met" if judged is not None and judged >= GOAL_PICK else "missed"), flush=True)
    (work / "watch-predict.json").write_text(json.dumps(results, indent=2, default=str))
    good = sum(1 for r in results if (r.get("head_to_head") or r["share"] or 0) >= GOAL_PICK)
    goals.check(f"predict: pipelines whose pick >= {GOAL_PICK} of the best", good, ">=", GOAL_PICKS, spec="d",
                detail=f" of {len(results)}")


def _describe(settings: dict[str, Any]) -> str:
    s = settings_of(settings)
    if not s["num_workers"]:
        return "num_workers=0"
    return (f"num_workers={s['num_workers']}, prefetch_factor={s['prefetch_factor']}, "
            f"persistent_workers={str(s['persistent_workers']).lower()}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", default="overhead,agreement,predict")
    parser.add_argument("--rounds", type=int, default=8, help="A B rounds of the overhead, and head to head")
    parser.add_argument("--keep", type=Path)
    parser.add_argument("--reuse", type=Path)
    args = parser.parse_args()
    parts = [p for p in args.parts.split(",") if p]
    unknown = set(parts) - {"overhead", "agreement", "predict"}
    if unknown:
        parser.error(f"unknown part(s) {', '.join(sorted(unknown))}")
    work = args.reuse or args.keep or Path(tempfile.mkdtemp(prefix="loadtune-watch-"))
    work.mkdir(parents=True, exist_ok=True)
    print(machine_line(), flush=True)
    goals = Goals()
    if "overhead" in parts:
        overhead(work, args.rounds, goals)
    if "agreement" in parts:
        agreement(work, args.reuse is not None, goals)
    if "predict" in parts:
        predict_part(work, args.reuse is not None, min(args.rounds, 6), goals)
    return goals.exit_status()


if __name__ == "__main__":
    sys.exit(main())
