"""Close calls in pairs: two configs measured in adjacent trial processes, in alternating order,
against the same two judged unpaired, and against the plain-loop referee.

A sweep's duel (the pick and its strongest rival) runs the two one right after the other, the
first alternating from pair to pair (ABBA), and judges them by the ratio of each pair
(loadtune.decide.paired): the machine's drift moves adjacent processes together and cancels in
that ratio. This measures whether it does here. For the pipeline's two configs (`--a`, `--b`,
JSON over the config's loader block) it runs `--pairs` pairs of fresh trial processes exactly as
the sweep's racer runs them (launch.run_in_trial_process over a TrialJob, one window a process;
each process's figure as the racer takes it: decide.paired.log_throughput), and prints:
  unpaired  the ratio of the two configs' means and its 90% interval from their own spreads
            (what the sweep's figures would show for the same processes taken as independent);
  paired    the mean of the pairs' ratios and its 90% interval (decide.paired: the paired t
            interval), as the racer judges a duel;
  referee   benchmarks/plain_loop.py over whole epochs, `--referee` rounds of fresh processes in
            alternating order (ABBA): the median of its per-round ratios.
Goal: the referee's ratio within the paired interval widened by the referee's own uncertainty
(their standard errors added in quadrature, at the same one-sided 95% on each side): the paired
call measures what a plain loop measures. Exits 1 when it misses it. The spreads are figures of
this machine, printed without a goal.

    python benchmarks/paired.py                                   # the demo, a close call
    python benchmarks/paired.py --config configs/demo.yaml --a '{"num_workers": 2}' \
        --b '{"num_workers": 3}' --pairs 8 --referee 4
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Goals, machine_line  # noqa: E402

from loadtune.asked.config import load_config  # noqa: E402
from loadtune.asked.plan import trial_for  # noqa: E402
from loadtune.decide.paired import PairedCall, judge, log_throughput, paired_spread, t_one_sided_95  # noqa: E402
from loadtune.sweep_process.launch import run_in_trial_process  # noqa: E402
from loadtune.trial_process.jobs import TrialJob  # noqa: E402

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
DEMO = ROOT / "configs" / "demo.yaml"
A = {"num_workers": 2, "persistent_workers": True}
B = {"num_workers": 2, "prefetch_factor": 1, "persistent_workers": True}
REFEREE_EPOCHS = 3
LOOP_TIMEOUT_S = 600


def jobs(config: Path, a: dict[str, Any], b: dict[str, Any]) -> tuple[TrialJob, TrialJob, float]:
    """The two trials as the racer sends them (one window a process), and the zone's tolerance."""
    spec = load_config(config)
    cfg = spec.config
    once = cfg.measure.model_copy(update={"repeats": 1})

    def job(settings: dict[str, Any]) -> TrialJob:
        return TrialJob(trial_for(cfg, settings, False), cfg.dataset, cfg.step, once, "cpu", str(spec.base_dir),
                        os.getpid(), multiprocessing.get_start_method())

    return job(a), job(b), cfg.measure.tolerance


def measured(job: TrialJob, run_epoch: int | None) -> float:
    outcome = run_in_trial_process(job, job.measure.timeout_s)
    if outcome.result is None:
        raise SystemExit(f"{job.name}: {outcome.status}: {outcome.reason}")
    value = log_throughput(outcome.result, run_epoch)
    if value is None:
        raise SystemExit(f"{job.name}: no whole window measured")
    return value


def plain(config: Path, settings: dict[str, Any]) -> float:
    cmd = [sys.executable, str(BENCH / "plain_loop.py"), str(config), json.dumps(settings),
           "--epochs", str(REFEREE_EPOCHS)]
    proc = subprocess.run(cmd, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                          timeout=LOOP_TIMEOUT_S, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"plain loop failed for {settings}: {proc.stderr.strip().splitlines()[-1:]}")
    return float(json.loads(proc.stdout.strip().splitlines()[-1])["samples_per_s"])


def interval(mean: float, se: float, dof: int) -> tuple[float, float]:
    half = t_one_sided_95(dof) * se
    return math.exp(mean - half), math.exp(mean + half)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, default=DEMO)
    parser.add_argument("--a", type=json.loads, default=A, help="the first config's settings (JSON)")
    parser.add_argument("--b", type=json.loads, default=B, help="the second config's settings (JSON)")
    parser.add_argument("--pairs", type=int, default=8, help="pairs of trial processes (default 8)")
    parser.add_argument("--referee", type=int, default=4, help="referee rounds of two processes (default 4)")
    args = parser.parse_args()
    if args.pairs < 2 or args.referee < 2:
        parser.error("--pairs and --referee must be 2 or more")
    print(machine_line())
    config = args.config.resolve()
    job_a, job_b, tolerance = jobs(config, args.a, args.b)
    run_epoch = job_a.measure.run_epoch_batches
    print(f"pipeline {config.name}: a = {job_a.trial.name}; b = {job_b.trial.name}", flush=True)
    started = time.perf_counter()
    measured(job_a, run_epoch)  # the trial server up, the files warm: not counted
    logs_a: list[float] = []
    logs_b: list[float] = []
    call = PairedCall(job_a.trial.name, job_b.trial.name)
    for k in range(args.pairs):
        order = ((job_a, logs_a), (job_b, logs_b)) if k % 2 == 0 else ((job_b, logs_b), (job_a, logs_a))
        for job, logs in order:
            logs.append(measured(job, run_epoch))
        call = call.plus(logs_b[-1] - logs_a[-1])
        print(f"  pair {k + 1}: {'ab' if k % 2 == 0 else 'ba'} b/a {math.exp(call.log_ratios[-1]):.3f}", flush=True)
    sd_a, sd_b = statistics.stdev(logs_a), statistics.stdev(logs_b)
    unpaired_sd = math.sqrt((sd_a ** 2 + sd_b ** 2) / 2)
    n = args.pairs
    diff = statistics.mean(logs_b) - statistics.mean(logs_a)
    lo_u, hi_u = interval(diff, unpaired_sd * math.sqrt(2 / n), 2 * n - 2)
    pooled = paired_spread([call])
    assert pooled is not None
    spread, dof = pooled
    judged = judge(call, tolerance, spread, dof)
    assert judged is not None
    pair_sd = statistics.stdev(call.log_ratios)
    print(f"unpaired: b/a {math.exp(diff):.3f} (90% interval {lo_u:.3f}-{hi_u:.3f}); a config's processes spread "
          f"{unpaired_sd:.1%} (a {sd_a:.1%}, b {sd_b:.1%}): a ratio of two independent ones "
          f"{math.sqrt(2) * unpaired_sd:.1%}")
    print(f"paired:   b/a {judged.ratio:.3f} (90% interval {judged.low:.3f}-{judged.high:.3f}); a pair's ratio "
          f"spread {pair_sd:.1%} ({pair_sd / (math.sqrt(2) * unpaired_sd):.2f} of the unpaired), "
          f"at the {tolerance:.0%} tolerance: {judged.outcome.value}", flush=True)
    ratios = []
    for r in range(args.referee):
        first, second = (args.a, args.b) if r % 2 == 0 else (args.b, args.a)
        x = plain(config, first)
        y = plain(config, second)
        ratios.append(y / x if r % 2 == 0 else x / y)
    referee = statistics.median(ratios)
    ref_se = statistics.stdev(math.log(r) for r in ratios) / math.sqrt(len(ratios))
    print(f"referee:  b/a {referee:.3f} over {args.referee} rounds of whole epochs "
          f"[{' '.join(f'{r:.3f}' for r in ratios)}]; {time.perf_counter() - started:.0f} s in all")
    paired_se = spread / math.sqrt(n)
    widened = t_one_sided_95(min(dof, len(ratios) - 1)) * math.sqrt(paired_se ** 2 + ref_se ** 2)
    off = abs(math.log(referee) - math.log(judged.ratio))
    goals = Goals()
    detail = f" (referee {referee:.3f}, paired {judged.ratio:.3f}, off {off:.1%}, allowed {widened:.1%})"
    goals.check("referee's distance from the paired ratio over what both intervals allow", off / widened, "<=",
                1.0, detail=detail)
    return goals.exit_status()


if __name__ == "__main__":
    sys.exit(main())
