"""How well the pipeline model predicts configs it has not seen, fitted as the sweep fits it.

The default strategy measures round 1 (the baseline and each single change from it, one process a
trial), fits the pipeline model to those trials, and decides from its predictions which other
configs to measure and which to leave as `predicted` rows. This judges that model. For each
pipeline (benchmarks/recommend.py's cnn, io, cpu and mixed, written as recommend.py writes them,
and the demo, configs/demo.yaml as it is):
  1. the sweep: `loadtune sweep CONFIG --json --repeats 1 --set measure.min_repeats=1` (the default
     strategy). Round 1 is measured as the default sweep measures it, one process a trial; with
     one repeat nothing is raced afterwards, so the CSV's round-1 rows are the very records the
     model was fitted to. Read from it: its JSON summary (the final model's error over the trials
     predicted before they ran, and whether it fell back to ofat) and its CSV;
  2. the round-1 model: `loadtune.model.model.fit` over the round-1 rows that ran (the ideal
     and rows the data check flagged left out), with the config's loader block as the baseline
     and the dataset length the rows give (the run's epoch), as the sweep's modelling fits it.
     Checked against the sweep itself: every row of round 2 carries the prediction the sweep's
     model made before it ran, and the refitted model must give the same;
  3. the truth: every config of the space measured as a grid (`--strategy grid --repeats R --set
     measure.min_repeats=R`, R = 3 by default; --repeats): one process is off by up to 45% now and
     then on this machine, so the truth is the mean of several;
  4. every config of the grid that round 1 did not measure (held out: the model never saw it) is
     predicted by the round-1 model and compared with its measurement.
Printed per pipeline: the sweep's own figures, the round-1 model's fitted figures and its
leave-one-out error over round 1 (what the sweep compares with 0.15 to fall back to ofat), each
config's measured and predicted throughput, and the median and worst |predicted / measured - 1|
over the held-out configs. Goals: the median over the held-out configs of every pipeline run
<= 0.10; the refitted model gives the sweep's own round-2 predictions (largest relative
difference <= 0.001), or it would not be the model the sweep used. Exits 1 when either is missed
(or a sweep fails).

    python benchmarks/model_error.py [--pipelines cnn,io,cpu,mixed,demo] [--repeats 3] [--quick]
                                     [--keep DIR] [--reuse DIR]

--quick: recommend.py's quick sweep space (num_workers 0, 2, 4), 2 processes a config for the
truth, and io and cpu unless --pipelines says otherwise. --reuse DIR reads the sweeps and grids an
earlier run wrote with --keep DIR instead of measuring. Not timed in this form yet: from the
earlier grids' times about 25 minutes on 2 cores, --quick about 4.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(BENCH))

from _common import Goals  # noqa: E402
from recommend import PIPELINES, machine_line, write_config  # noqa: E402

from loadtune.asked.config import load_config  # noqa: E402
from loadtune.asked.trials import IDEAL  # noqa: E402
from loadtune.model.fitted import PipelineModel  # noqa: E402
from loadtune.model.model import fit, leave_one_out_error  # noqa: E402
from loadtune.model.predict import config_text, settings_key, settings_of
from loadtune.record.record import Record, read_records  # noqa: E402

GOAL_MEDIAN = 0.10
GOAL_SAME_MODEL = 0.001  # the refitted model's round-2 predictions against the sweep's, relative
DEMO = ROOT / "configs" / "demo.yaml"
DEFAULT_PIPELINES = ("cnn", "io", "cpu", "mixed", "demo", "cnn-threads")
QUICK_PIPELINES = ("io", "cpu")
KNOWN_PIPELINES = (*PIPELINES, "demo")
REPEATS, REPEATS_QUICK = 3, 2
SWEEP_TIMEOUT_S = 3600
LOG_TAIL = 15
FIRST_ROUND = 1
FOLLOW_UP = 2  # the round the strategy chose with the round-1 model's predictions


@dataclass
class Judged:
    """One pipeline: the round-1 model, its held-out errors, and how well it reproduces the sweep."""

    name: str
    errors: list[float] = field(default_factory=list)  # |predicted / measured - 1| of each held-out config
    same_model: float | None = None  # largest relative difference from the sweep's round-2 predictions
    compared: int = 0  # round-2 rows compared with them
    fitted: bool = False


def sweep(config: Path, out: Path, extra: Sequence[str]) -> float:
    """`python -m loadtune sweep CONFIG --json --out OUT EXTRA`, its summary in OUT.json and its log
    in OUT.log; the wall time."""
    cmd = [sys.executable, "-m", "loadtune", "sweep", str(config), "--json", "--out", str(out), *extra]
    out.unlink(missing_ok=True)  # a CSV left by an earlier run in --keep DIR is not this sweep's
    log = out.with_suffix(".log")
    start = time.perf_counter()
    with open(out.with_suffix(".json"), "w") as summary, open(log, "w") as err:
        proc = subprocess.run(cmd, cwd=out.parent, stdout=summary, stderr=err, timeout=SWEEP_TIMEOUT_S)
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-LOG_TAIL:])
        raise SystemExit(f"sweep failed (exit {proc.returncode}): {' '.join(cmd)}\n{tail}")
    return time.perf_counter() - start


def default_sweep_args() -> list[str]:
    """The default strategy with round 1 one process a trial, as the default sweep measures it, and
    no racing after the rounds (racing would average more processes into round 1's rows)."""
    return ["--repeats", "1", "--set", "measure.min_repeats=1"]


def grid_args(repeats: int) -> list[str]:
    return ["--strategy", "grid", "--repeats", str(repeats), "--set", f"measure.min_repeats={repeats}"]


def modelled(records: Sequence[Record]) -> list[Record]:
    """The rows the sweep's model is fitted to: trials that ran; not the ideal (the step fed from
    memory), not a row the data check flagged (another pipeline's samples)."""
    return [r for r in records if r.ran and r.trial != IDEAL and not r.data_flagged]


def round_one(records: Sequence[Record]) -> list[Record]:
    """What the model strategy has measured when it first fits: round 1's rows."""
    return [r for r in modelled(records) if r.run.round == FIRST_ROUND]


def fit_round_one(records: Sequence[Record], baseline: dict[str, Any]) -> PipelineModel | None:
    """The model as the sweep fits it after round 1 (sweep_process/modelling.Modelling.fit): every
    round-1 row at once, the config's loader block as the baseline of unexplained settings, the
    run's epoch from the rows."""
    return fit(round_one(records), baseline=baseline)


def kwargs_of(record: Record, baseline: dict[str, Any]) -> dict[str, Any]:
    """A row's DataLoader keywords: the baseline's with the row's settings over them."""
    return {**baseline, **settings_of(record)}


def same_model(model: PipelineModel, records: Sequence[Record], baseline: dict[str, Any]) -> tuple[float | None, int]:
    """The largest |refitted / the sweep's - 1| over the round-2 rows (predicted by the sweep's model
    fitted to round 1, before they ran), and how many there were."""
    diffs = [abs(model.predict(kwargs_of(r, baseline)).throughput / r.assessment.predicted_throughput - 1)
             for r in records if r.run.round == FOLLOW_UP and r.assessment.predicted_throughput and r.trial != IDEAL]
    return (max(diffs) if diffs else None), len(diffs)


def truth(records: Sequence[Record]) -> dict[tuple[str, ...], Record]:
    """The grid's configs by their settings (a trial the grid's advice asked for beyond the space left out)."""
    found: dict[tuple[str, ...], Record] = {}
    for r in modelled(records):
        if not r.assessment.asked_by:
            found.setdefault(settings_key(settings_of(r)), r)
    return found


def model_line(model: PipelineModel | dict[str, Any]) -> str:
    m = model.to_json() if isinstance(model, PipelineModel) else model
    return (f"fetch {m['fetch_cpu_ms_per_sample']:.3f} ms CPU + {m['fetch_wait_ms_per_sample']:.3f} ms waiting per "
            f"sample, step {m['step_ms_per_sample']:.3f} ms per sample ({m['step_cpu_ms_per_sample']:.3f} CPU), "
            f"fetch_cv {m['fetch_cv']}, worker_put_ms {m['worker_put_ms']}, core_share {m['core_share']}, "
            f"oversubscription {m['oversubscription']}, dataset_len {m['dataset_len']}")


def judge(name: str, config: Path, swept: Path, grid: Path) -> Judged:
    """The round-1 model of the sweep in `swept` against the truth in `grid`, printed."""
    judged = Judged(name)
    cfg = load_config(config).config
    baseline = cfg.loader.model_dump()
    shown = tuple(cfg.sweep) or ("num_workers",)
    records = read_records(swept)
    summary = json.loads(swept.with_suffix(".json").read_text() or "{}")
    first = round_one(records)
    rounds = sorted({r.run.round for r in modelled(records) if r.run.round is not None})
    per_round = ", ".join(f"{sum(1 for r in modelled(records) if r.run.round == n)} in round {n}" for n in rounds)
    final = summary.get("model") or {}
    if final:
        error = "-" if final.get("error") is None else f"{final['error']:.3f}"
        print(f"  the sweep's trials: {per_round}; {'fell back to ofat' if final.get('fell_back_to_ofat') else 'model'}"
              f" strategy; its own error {error} over {final.get('error_trials')} trial(s) predicted before they ran")
        print(f"  its final model (every trial it measured): {model_line(final)}")
    model = fit_round_one(records, baseline)
    if model is None:
        print(f"  {name}: too few round-1 trials ran to fit ({len(first)})")
        return judged
    judged.fitted = True
    loo = leave_one_out_error(first)
    print(f"  the round-1 model ({len(first)} trials, one process each): {model_line(model)}")
    print(f"  its leave-one-out error over round 1 (the sweep falls back to ofat above 0.15): "
          f"{'-' if loo is None else f'{loo:.3f}'}")
    judged.same_model, judged.compared = same_model(model, records, baseline)
    if judged.compared:
        print(f"  the sweep's own round-2 predictions, refitted: largest difference {judged.same_model:.2e} "
              f"over {judged.compared} trial(s)")
    else:
        print("  the sweep's own round-2 predictions, refitted: none to compare (no round 2)")
    seen = {settings_key(settings_of(r)) for r in first}
    measured_in = {settings_key(settings_of(r)): r.run.round for r in modelled(records)}
    truths = truth(read_records(grid))
    print(f"  {'config':<72} {'measured':>9} {'predicted':>9}  error   in the sweep")
    for key, r in sorted(truths.items(), key=lambda kv: (kv[1].settings.num_workers or 0, kv[0])):
        guess = model.predict(kwargs_of(r, baseline)).throughput
        error = guess / r.throughput - 1
        held_out = key not in seen
        if held_out:
            judged.errors.append(abs(error))
        where = "round 1 (fitted)" if not held_out else (f"round {measured_in[key]}" if key in measured_in else "-")
        print(f"  {config_text(settings_of(r), shown):<72} {r.throughput:9.1f} {guess:9.1f} {error:+6.3f}  "
              f"{where}")
    if judged.errors:
        print(f"  {name}: median |predicted/measured - 1| {statistics.median(judged.errors):.3f}, worst "
              f"{max(judged.errors):.3f} over {len(judged.errors)} held-out configs")
    else:
        print(f"  {name}: no held-out config measured")
    return judged


def check_goals(results: Sequence[Judged], goals: Goals | None = None) -> Goals:
    """The pooled median over every pipeline's held-out configs, and the refitted model against the
    sweep's own predictions, each against its goal."""
    goals = goals if goals is not None else Goals()
    everything = [e for j in results for e in j.errors]
    per = ", ".join(f"{j.name} {statistics.median(j.errors):.3f}/{max(j.errors):.3f}" if j.errors
                    else f"{j.name} n/a" for j in results)
    unfitted = [j.name for j in results if not j.fitted]
    worst = f", worst {max(everything):.3f}" if everything else ""
    goals.check(f"median |predicted/measured - 1| of the round-1 model over {len(everything)} held-out configs",
                None if unfitted or not everything else statistics.median(everything), "<=", GOAL_MEDIAN,
                detail=f"{worst} (median/worst: {per})" + (f"; not fitted: {', '.join(unfitted)}" if unfitted else ""))
    compared = [j for j in results if j.compared]
    if compared:
        goals.check(f"the refitted round-1 model against the sweep's own round-2 predictions ("
                    f"{sum(j.compared for j in compared)} trials), largest relative difference",
                    max(j.same_model for j in compared if j.same_model is not None), "<=", GOAL_SAME_MODEL,
                    spec=".2e")
    else:
        print("the refitted round-1 model against the sweep's own predictions: not checked (no round 2 ran)")
    return goals


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pipelines", default=None,
                        help=f"comma-separated, of {', '.join(KNOWN_PIPELINES)} "
                             f"(default {','.join(DEFAULT_PIPELINES)}; --quick {','.join(QUICK_PIPELINES)})")
    parser.add_argument("--repeats", type=int, default=None,
                        help=f"processes a config of the truth's grid (default {REPEATS}, --quick {REPEATS_QUICK})")
    parser.add_argument("--quick", action="store_true", help="recommend.py's quick space, fewer repeats and pipelines")
    parser.add_argument("--keep", type=Path, help="keep the configs, CSVs, summaries and logs in this folder")
    parser.add_argument("--reuse", type=Path, help="read the sweeps and grids an earlier --keep DIR wrote")
    args = parser.parse_args()
    text = args.pipelines or ",".join(QUICK_PIPELINES if args.quick else DEFAULT_PIPELINES)
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in KNOWN_PIPELINES]
    if unknown or not names:
        parser.error(f"unknown pipeline(s) {', '.join(unknown) or '(none given)'}; known: {', '.join(KNOWN_PIPELINES)}")
    repeats = args.repeats or (REPEATS_QUICK if args.quick else REPEATS)
    if repeats < 1:
        parser.error("--repeats must be 1 or more")
    work = (args.reuse or args.keep or Path(tempfile.mkdtemp(prefix="loadtune-model-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    print(machine_line())
    results = []
    try:
        for name in names:
            if name == "demo":
                config = DEMO
            elif args.reuse is not None:
                config = work / f"{name}.yaml"
            else:
                config = write_config(work, name, PIPELINES[name], args.quick)
            swept, grid = work / f"{name}-sweep.csv", work / f"{name}-grid.csv"
            if args.reuse is None:
                seconds = sweep(config, swept, default_sweep_args())
                print(f"\n{name}: the default sweep (round 1 one process a trial, no racing) in {seconds:.0f} s",
                      flush=True)
                seconds = sweep(config, grid, grid_args(repeats))
                print(f"{name}: the truth, a grid of {repeats} processes a config, in {seconds:.0f} s", flush=True)
            else:
                print(f"\n{name}: the sweep and the grid read from {work}")
            results.append(judge(name, config, swept, grid))
    finally:
        if args.keep is None and args.reuse is None:
            shutil.rmtree(work, ignore_errors=True)
    print()
    return check_goals(results).exit_status()


if __name__ == "__main__":
    sys.exit(main())
