"""How well the pipeline model predicts trials it has not seen, on full grids.

For each pipeline (benchmarks/recommend.py's cnn, io, cpu and mixed, and the demo), the whole
sweep space is measured as a grid (`loadtune sweep --strategy grid`, every trial 3 processes,
no racing: the truth), then the model is judged as the default strategy uses it:
  - it is fitted to the first round alone (the baseline and each single change from it: what
    the model strategy has measured when it first predicts), and every other config of the grid
    is predicted and compared with its measurement;
  - each first-round trial is predicted by the model fitted to the other first-round trials.
So every trial is predicted by a model that did not see it. Printed per pipeline: each trial's
measured and predicted throughput, and the median and worst |predicted / measured - 1|; then
over all pipelines. Goals: median <= 0.10, worst <= 0.25. Exits 1 when either is missed.

    python benchmarks/model_error.py [--pipelines cnn,io,cpu,mixed,demo] [--repeats 3] [--keep DIR]
                                     [--reuse DIR]

--reuse DIR reads the grids written by an earlier run with --keep DIR instead of measuring.
About 15 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(BENCH))

from _common import Goals  # noqa: E402
from recommend import PIPELINES, machine_line, write_config  # noqa: E402

from loadtune.results.model import fit  # noqa: E402
from loadtune.results.record import Record, read_records  # noqa: E402
from loadtune.trials import BASELINE, IDEAL, effective_settings  # noqa: E402

GOAL_MEDIAN = 0.10
GOAL_WORST = 0.25
KEYS = ("num_workers", "prefetch_factor", "persistent_workers")
DEMO = ROOT / "configs" / "demo.yaml"


def key(record: Record) -> tuple:
    s = effective_settings({k: getattr(record, k) for k in (*KEYS, "pin_memory", "batch_size")})
    return tuple(s[k] for k in KEYS)


def first_round(records: list[Record]) -> list[Record]:
    """The baseline and the configs one change away from it: what round 1 measures."""
    base = key(next(r for r in records if r.trial == BASELINE))

    def changes(r: Record) -> int:
        k = key(r)
        if base[0] == 0:  # settings that need workers are not swept on a baseline without them
            return 0 if k[0] == 0 else (1 if k[1] == 2 and not k[2] else 2)
        if k[0] == 0:
            return 1
        return sum(a != b for a, b in zip(k, base))

    return [r for r in records if changes(r) <= 1]


def measure_grid(name: str, config: Path, out: Path, repeats: int) -> float:
    cmd = [sys.executable, "-m", "loadtune", "sweep", str(config), "--strategy", "grid", "--repeats", str(repeats),
           "--set", f"measure.min_repeats={repeats}", "--out", str(out)]
    start = time.perf_counter()
    with open(out.with_suffix(".log"), "w") as log:
        subprocess.run(cmd, cwd=out.parent, stdout=log, stderr=log, check=True, timeout=3600)
    return time.perf_counter() - start


def judge(name: str, records: list[Record]) -> list[float]:
    records = [r for r in records if r.ran and r.trial != IDEAL and not r.data_flagged]
    first = first_round(records)
    model = fit(first)  # the run's epochs, as the sweep fits it (run_epoch_batches in the rows)
    assert model is not None, f"{name}: too few first-round trials to fit"
    errors = []
    print(f"  fitted to {len(first)} first-round trials: fetch {model.fetch_cpu_ms_per_sample:.3f} ms CPU + "
          f"{model.fetch_wait_ms_per_sample:.3f} ms waiting per sample, step {model.step_ms_per_sample:.3f} ms "
          f"per sample ({model.step_cpu_ms_per_sample:.3f} CPU), fetch_cv {model.fetch_cv}, worker_put_ms "
          f"{model.worker_put_ms}, core_share {model.core_share}, oversubscription {model.oversubscription}")
    print(f"  {'num_workers, prefetch, persistent':<36} {'measured':>9} {'predicted':>9}  error   from")
    for r in sorted(records, key=key):
        if r in first:
            others = fit([o for o in first if o is not r])
            if others is None:
                continue
            guess, how = others.predict(r.to_dict()).throughput, "first round, the others"
        else:
            guess, how = model.predict(r.to_dict()).throughput, "first round"
        error = guess / r.throughput - 1
        errors.append(abs(error))
        print(f"  {str(key(r)):<36} {r.throughput:9.1f} {guess:9.1f} {error:+6.3f}  {how}")
    print(f"  {name}: median |predicted/measured - 1| {statistics.median(errors):.3f}, worst {max(errors):.3f} "
          f"over {len(errors)} trials")
    return errors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pipelines", default="cnn,io,cpu,mixed,demo")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--keep", type=Path)
    parser.add_argument("--reuse", type=Path)
    args = parser.parse_args()
    names = [n.strip() for n in args.pipelines.split(",") if n.strip()]
    unknown = [n for n in names if n not in PIPELINES and n != "demo"]
    if unknown:
        parser.error(f"unknown pipeline(s) {', '.join(unknown)}")
    work = args.reuse or args.keep or Path(tempfile.mkdtemp(prefix="loadtune-model-"))
    work.mkdir(parents=True, exist_ok=True)
    print(machine_line())
    everything: list[float] = []
    per: dict[str, tuple[float, float]] = {}
    for name in names:
        config = DEMO if name == "demo" else write_config(work, name, PIPELINES[name], False)
        out = work / f"{name}-grid.csv"
        if args.reuse is None:
            seconds = measure_grid(name, config, out, args.repeats)
            print(f"\n{name}: grid measured in {seconds:.0f} s ({args.repeats} processes a trial)")
        else:
            print(f"\n{name}: grid read from {out}")
        errors = judge(name, read_records(out))
        everything += errors
        per[name] = (statistics.median(errors), max(errors))
    print("\n" + ", ".join(f"{n} {m:.3f}/{w:.3f}" for n, (m, w) in per.items()) + " (median/worst)")
    goals = Goals()
    goals.check(f"median |predicted/measured - 1| over all {len(everything)} trials",
                statistics.median(everything) if everything else None, "<=", GOAL_MEDIAN)
    goals.check(f"worst |predicted/measured - 1| over all {len(everything)} trials",
                max(everything) if everything else None, "<=", GOAL_WORST)
    if args.keep is None and args.reuse is None:
        shutil.rmtree(work, ignore_errors=True)
    return goals.exit_status()


if __name__ == "__main__":
    raise SystemExit(main())
