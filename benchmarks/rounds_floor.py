"""What the search's rounds cost by themselves, against the reference version's default sweep.

recommend.py's time goal is the default sweep <= 0.5x the reference version's (6f3bd58: three
repeats of every trial of round 1). This times, for each pipeline of recommend.py, three
sweeps of the same config through the command line, in alternating order over the pipelines:
  ref:     the reference version's default sweep;
  now:     this code's default sweep (racing included);
  rounds:  this code's sweep with `--repeats 1`: every trial one process and no racing (a
           trial needs a second repeat to race), so only round 1 (every single change from
           the baseline, and the ideal) and the follow-up rounds on the winner, what the
           strategy measures before it decides anything.
and prints each one's wall time, the ratios to the reference, and the trial processes each
ran. If `rounds` is above 0.5 of `ref`, no racing rule can bring the default sweep under
the goal. About 10 minutes on 2 cores.

No goal of its own (the 0.5 is recommend.py's): a measurement of the floor under that goal; exits 0
once its figures are printed.

    python benchmarks/rounds_floor.py [--pipelines cnn,io] [--reference-ref REF] [--keep DIR]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

from recommend import (
    DEFAULT_PIPELINES,
    GOAL_TIME_RATIO,
    PIPELINES,
    REFERENCE_REF,
    ROOT,
    fetch_reference,
    machine_line,
    pipeline_names,
    run_sweep,
    workspace,
    write_config,
)


def processes(rows: list[dict]) -> int:
    """Trial processes a sweep ran: one per repeat of every measured row."""
    return sum(int(r.get("repeats") or 0) for r in rows if r.get("status") == "ok")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pipelines", default=",".join(DEFAULT_PIPELINES), help="comma-separated, or all")
    parser.add_argument("--reference-ref", default=REFERENCE_REF)
    parser.add_argument("--keep", type=Path, help="keep configs, CSVs and logs in this folder")
    args = parser.parse_args()
    names = pipeline_names(parser, args.pipelines)
    started = time.perf_counter()
    scratch, work = workspace(args.keep, "loadtune-rounds-")
    lines = []
    try:
        commit = fetch_reference(args.reference_ref, scratch / "reference")
        print(machine_line())
        print(f"reference version: {commit}")
        print(f"{'pipeline':<9} {'ref':>12} {'now':>16} {'rounds':>16}   now/ref  rounds/ref")
        for i, name in enumerate(names):
            config = write_config(work, name, PIPELINES[name], False)
            order = [("ref", scratch / "reference", []), ("now", ROOT, []), ("rounds", ROOT, ["--repeats", "1"])]
            sweeps = {}
            for label, code, extra in order if i % 2 == 0 else order[::-1]:
                sweeps[label] = run_sweep(code, config, work / f"{name}-{label}.csv", extra)
            ref, now, rounds = sweeps["ref"], sweeps["now"], sweeps["rounds"]
            line = (f"{name:<9} {ref.seconds:5.0f} s ({processes(ref.rows):2d}) "
                    f"{now.seconds:7.0f} s ({processes(now.rows):2d})"
                    f" {rounds.seconds:7.0f} s ({processes(rounds.rows):2d})   {now.seconds / ref.seconds:7.2f}"
                    f"  {rounds.seconds / ref.seconds:10.2f}")
            lines.append((ref.seconds, now.seconds, rounds.seconds))
            print(line, flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    ref_s, now_s, rounds_s = (sum(x[i] for x in lines) for i in range(3))
    print(f"{'all':<9} {ref_s:5.0f} s      {now_s:7.0f} s      {rounds_s:7.0f} s        {now_s / ref_s:7.2f}"
          f"  {rounds_s / ref_s:10.2f}")
    print("(trial processes in brackets: one per repeat of each measured row)")
    over = [f"{n} {x[2] / x[0]:.2f}" for n, x in zip(names, lines) if x[2] / x[0] > GOAL_TIME_RATIO]
    print(f"the rounds alone, no racing, above {GOAL_TIME_RATIO}x the reference's sweep: "
          f"{', '.join(over) if over else 'none'}")
    print(f"total {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
