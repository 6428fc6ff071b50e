"""Ranks under stress: many two-rank trials in a row without a stall, then a stall injected in
each phase, each reported within its limit with the rank, the phase and the stack.

1. One sweep through the command line, `--ranks 2 --strategy grid --repeats 1`, of 30 trials
   (num_workers 1-3 x prefetch_factor x shuffle, persistent workers, so every trial runs the
   extra warm-up for its workers that ranks decide together) and the ideal: a dataset whose
   samples cost each rank differently (tests/rank_parts.py:rank_cost), so the ranks' clocks
   disagree, with the stall limits as a user gets them. Every row must be `ok`.
2. Five more sweeps (baseline and ideal each), with small stall limits (LOADTUNE_STALL_LIMITS_S),
   each stalling rank 1 in one phase as tests/test_rank_stalls.py does: the test hook before
   the group is formed, then the user's own code (a dataset that never builds, a first item that
   never comes, a step that never ends, a thread that holds the rank's exit). The baseline's row
   must be `failed` (not `timeout`) with a one-line reason naming rank 1, the phase and a frame
   of the stalling code, reported at most LATE_S past its limit.

    python benchmarks/ranks_stress.py            # about 3 minutes on 2 cores
    python benchmarks/ranks_stress.py --trials-only

Exits 1 on any miss (a sweep that fails exits with its message).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from _common import Goals

from loadtune.trial_process.phases import LIMITS_VAR, TEST_STALL_VAR, StallLimits

PARTS = str(ROOT / "tests" / "rank_parts.py")
START_LIMIT_S, OTHER_LIMIT_S = 8.0, 5.0  # the stall runs' limits: before the first batch, and after
LATE_S = 2.0  # how far past its limit a stall may be reported: the watch reads every 0.5 s
TIMEOUT_S = 120.0  # the stall runs' trial timeout: far above their limits

REPORTED = re.compile(r"^rank (\d+) stalled in (.+?) for ([\d.]+) s \(limit ([\d.]+) s\)(, again after a retry "
                      r"on a fresh rendezvous)?: at (.+); stacks in (\S+)$")


def base_config(**changes: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "name": "ranks-stress",
        "dataset": {"factory": f"{PARTS}:rank_cost", "kwargs": {"num_samples": 480, "cost_s": {0: 0.0005, 1: 0.002}}},
        "loader": {"batch_size": 8, "num_workers": 1, "prefetch_factor": 2, "persistent_workers": True},
        "sweep": {},
        "step": {"factory": f"{PARTS}:rank_step", "kwargs": {"sleep_s": {0: 0.004, 1: 0.004}}},
        "measure": {"warmup_batches": 3, "warmup_batches_per_worker": 2, "batches": 20, "repeats": 1,
                    "min_repeats": 1, "max_outside_cpu": 100.0},
        "device": "cpu",
    }
    config.update(changes)
    return config


def sweep(config: dict[str, Any], folder: Path, name: str, env: dict[str, str]) -> tuple[pd.DataFrame, float, str]:
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    out = folder / f"{name}.csv"
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "loadtune", "sweep", str(path), "--ranks", "2", "--strategy",
                             "grid", "--repeats", "1", "--out", str(out)],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    took = time.monotonic() - started
    if result.returncode != 0 or not out.exists():
        print(result.stdout[-2000:], result.stderr[-3000:], sep="\n")
        raise SystemExit(f"{name}: the sweep failed (exit {result.returncode})")
    return pd.read_csv(out), took, result.stderr


def many_trials(folder: Path, env: dict[str, str], goals: Goals) -> None:
    config = base_config(sweep={"num_workers": [1, 2, 3], "prefetch_factor": [1, 2, 3, 4, 6],
                                "shuffle": [False, True]})
    limits = StallLimits.for_timeout(300.0, environ={})
    print(f"1. {config['sweep']} on 2 ranks, persistent workers; stall limits {limits.start_s:g} s before the "
          f"first batch, {limits.other_s:g} s after")
    df, took, _ = sweep(config, folder, "many", env)
    ran = df[df.status.notna()]
    ok = ran[ran.status == "ok"]
    bad = ran[ran.status != "ok"]
    walls = ok.trial_wall_s if "trial_wall_s" in ok else pd.Series(dtype=float)
    print(f"   {len(ran)} two-rank trials in {took:.0f} s ({len(ok)} ok, {len(bad)} not), "
          f"each {walls.median():.1f} s median, {walls.max():.1f} s at most")
    for _, row in bad.iterrows():
        print(f"   not ok: {row.trial}: {row.status}: {row.reason}")
    goals.check("   two-rank trials in a row", len(ran), ">=", 30, spec="d")
    goals.check("   of them not ok", len(bad), "<=", 0, spec="d")


STALLS = [
    # phase, what stalls (config changes), a frame the stack must show, the test hook
    ("rendezvous", {}, "injected_stall (phases.py:", "1:rendezvous:3600"),
    ("setup", {"dataset": {"factory": f"{PARTS}:slow_to_build", "kwargs": {"num_samples": 400}}},
     "slow_to_build (rank_parts.py:", None),
    ("first batch", {"dataset": {"factory": f"{PARTS}:first_item_hangs", "kwargs": {"num_samples": 400}},
                     "loader": {"batch_size": 8, "num_workers": 0}}, "__getitem__ (rank_parts.py:", None),
    ("window 1", {"step": {"factory": f"{PARTS}:rank_step", "kwargs": {"sleep_s": {0: 0.004, 1: 0.004},
                                                                      "stall_rank": 1, "stall_at": 10}}},
     "step (rank_parts.py:", None),
    ("teardown", {"dataset": {"factory": f"{PARTS}:keeps_a_thread", "kwargs": {"num_samples": 400}}},
     "stall_forever (rank_parts.py:", None),
]


def injected_stalls(folder: Path, env: dict[str, str], goals: Goals) -> None:
    print(f"2. rank 1 stalled in each phase; limits {START_LIMIT_S:g} s before the first batch, "
          f"{OTHER_LIMIT_S:g} s after; reported at most {LATE_S:g} s late")
    for phase, changes, frame, hook in STALLS:
        run_env = {**env, LIMITS_VAR: f"{START_LIMIT_S},{OTHER_LIMIT_S}"}
        if hook:
            run_env[TEST_STALL_VAR] = hook
        config = base_config(**changes)
        config["measure"] = {**config["measure"], "timeout_s": TIMEOUT_S}
        df, took, _ = sweep(config, folder, phase.replace(" ", "-"), run_env)
        row = df.set_index("trial").loc["baseline"]
        reason = str(row.reason)
        found = REPORTED.match(reason)
        limit = START_LIMIT_S if phase in ("rendezvous", "setup", "first batch") else OTHER_LIMIT_S
        checks = {
            "failed": row.status == "failed",
            "one line": "\n" not in reason,
            "rank 1": bool(found) and found.group(1) == "1",
            "phase": bool(found) and found.group(2) == phase,
            "limit": bool(found) and float(found.group(4)) == limit,
            "in time": bool(found) and float(found.group(3)) <= limit + LATE_S,
            "stack": bool(found) and frame in found.group(6),
            "stacks kept": bool(found) and Path(found.group(7)).exists(),
        }
        missed = [name for name, passed in checks.items() if not passed]
        after = f"{float(found.group(3)):.1f} s" if found else "?"
        retried = " (retried once)" if found and found.group(5) else ""
        goals.require(f"   stall in {phase}", not missed,
                      f"the row failed, one line, rank 1, the phase, its limit, at most {LATE_S:g} s past it, "
                      "the stalling frame, the stacks kept",
                      detail=f" reported after {after} (limit {limit:g} s){retried}, sweep {took:.0f} s"
                             + (f"; not: {', '.join(missed)}" if missed else ""))
        print(f"      {reason}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials-only", action="store_true", help="only the trials in a row, no stall")
    parser.add_argument("--stalls-only", action="store_true", help="only the injected stalls")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
    env.pop(LIMITS_VAR, None)
    env.pop(TEST_STALL_VAR, None)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="loadtune-ranks-stress-") as work:
        folder = Path(work)
        env["TMPDIR"] = work  # the stall files too
        goals = Goals()
        if not args.stalls_only:
            many_trials(folder, env, goals)
        if not args.trials_only:
            injected_stalls(folder, env, goals)
    print(f"all in {time.monotonic() - started:.0f} s")
    return goals.exit_status()


if __name__ == "__main__":
    sys.exit(main())
