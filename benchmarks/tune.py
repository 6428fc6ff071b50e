"""What tuning the real run gives (`loadtune.tune`, docs/tune.md): a tuned training run against
the same run started with the baseline's settings and with the grid's best.

For each pipeline (benchmarks/recommend.py's cnn, io, cpu and mixed, the CPU-step pipeline
cnn-threads of benchmarks/pipelines.py, and `images`: the demo's JPEGs as examples/train_demo.py
loads them), each run a fresh process of a plain training loop (benchmarks/plain_loop.py's build:
the config's dataset, loader and step, nothing of loadtune's harness), over EPOCHS whole epochs:

  grid      each config of GRID (num_workers 0 to 4, persistent, the loader's prefetch) for
            GRID_EPOCHS epochs, ROUNDS rounds in alternating order: the grid's best by its mean
  baseline  the loader as the config gives it
  best      the grid's best
  tuned     the baseline's loader through loadtune.tune(loader, budget_s=BUDGET_S): its wall
            time, when it settled, its throughput after settling and what it kept
  kept      the kept settings from the start, over the same epochs (the overhead after settling:
            the tuned run's throughput over the epochs after it settled against this run's over
            the same epochs)

in the order baseline, best, tuned, kept, then again in reverse (A B C D D C B A); each figure is
the mean of its two runs. Goals, per pipeline: after settling, throughput >= 0.97 of the grid's
best's over the same epochs; settled within max(60 s, 10% of the run); the tuned run's wall time recovers >= 0.80 of
what the best config saves over the baseline (skipped where the best saves under 5%: nothing to
recover); overhead after settling >= 0.99. Then, on a dataset of indices: every index once per
epoch in the sampler's order over a tuned run with several switches mid-epoch, on 1 rank and on
2 (torch.distributed, gloo on CPU, 2 processes started as torchrun starts them, in step through an
all-reduce each batch, each rank its DistributedSampler's share: every index each rank's sampler
gives served once per epoch, in its order, and both ranks switching at the same batches to the
same settings), and a setting whose workers raise, survived. Exits 1 when a goal is missed.

    python benchmarks/tune.py [--pipelines io,cpu|all] [--epochs N] [--budget S] [--pairs N] [--only-checks]

--only-checks runs the checks on the dataset of indices alone (no pipeline: a minute or so);
--pairs N adds N (tuned, kept) pairs after them for the overhead, which two runs of each resolve
to about 1% on a machine whose processes differ by 1%.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import yaml
from _common import Goals, machine_line
from plain_loop import build, samples_in
from recommend import PIPELINES

HERE = Path(__file__).resolve().parent
DEFAULT = ("io", "cpu", "mixed", "cnn", "cnn-threads", "images")
EPOCHS = 24
BUDGET_S = 15.0
GRID_EPOCHS = 2
ROUNDS = 2
GRID = [{"num_workers": 0}] + [{"num_workers": w, "persistent_workers": True} for w in (1, 2, 3, 4)]
GOAL_AFTER_SETTLING = 0.97
GOAL_RECOVERED = 0.80
GOAL_OVERHEAD = 0.99
SETTLE_FLOOR_S, SETTLE_SHARE = 60.0, 0.10
MIN_SAVING = 0.05
CHECK_WINDOW_S = 0.1  # the checks' windows: many switches in a short run
CHECK_EPOCHS = 3
CHECK_MIN_SWITCHES = 3
RANKS, RANK_SAMPLES, RANK_BATCH = 2, 2000, 8
RANKS_TIMEOUT_S = 600


# --- the child: one run in a fresh process --------------------------------------------------------


def child(mode: str, config: Path, settings: dict[str, Any], epochs: int, budget_s: float) -> dict[str, Any]:
    """One plain training loop over `epochs` whole epochs; `tuned`: through loadtune.tune. Each
    epoch's end time is kept, so the throughput over any run of epochs can be read."""
    built = build(config, settings)
    loader, step = built.loader, built.step
    tuned = None
    if mode == "tuned":
        import loadtune

        tuned = loadtune.tune(loader, out=Path(tempfile.mkdtemp()) / "tuned.csv", budget_s=budget_s, name="train")
        loader = tuned
    ends, samples, settled_at = [], [], None
    start = time.perf_counter()
    for _ in range(epochs):
        n = 0
        for batch in loader:
            step(batch)
            n += samples_in(batch)
            if tuned is not None and settled_at is None and tuned.tuner.settled:
                settled_at = time.perf_counter() - start
        ends.append(time.perf_counter() - start)
        samples.append(n)
    out: dict[str, Any] = {"wall_s": ends[-1], "ends": ends, "samples": samples}
    if tuned is not None:
        out.update(settled_s=settled_at, kept=tuned.settings, tried=len(tuned.tuner.tried))
        tuned.close()
    return out


def run_child(mode: str, config: Path, settings: dict[str, Any], epochs: int, budget_s: float) -> dict[str, Any]:
    done = subprocess.run([sys.executable, __file__, "--child", mode, str(config), json.dumps(settings), str(epochs),
                           str(budget_s)], capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"{mode} {settings}: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def rate(run: dict[str, Any], from_epoch: int = 0) -> float:
    """Samples per second over the run's epochs from `from_epoch` on."""
    t0 = run["ends"][from_epoch - 1] if from_epoch else 0.0
    return sum(run["samples"][from_epoch:]) / (run["wall_s"] - t0)


# --- one pipeline ----------------------------------------------------------------------------------


def write_config(work: Path, name: str) -> Path:
    pipeline = PIPELINES[name]
    config = {k: pipeline[k] for k in ("dataset", "loader", "step") if k in pipeline}
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def grid_best(config: Path, base: dict[str, Any], budget_s: float) -> tuple[dict[str, Any], float]:
    runs: dict[int, list[float]] = {i: [] for i in range(len(GRID))}
    for r in range(ROUNDS):
        order = range(len(GRID)) if r % 2 == 0 else reversed(range(len(GRID)))
        for i in order:
            settings = {**base, **GRID[i]}
            runs[i].append(rate(run_child("plain", config, settings, GRID_EPOCHS, budget_s)))
    best = max(runs, key=lambda i: statistics.mean(runs[i]))
    return {**base, **GRID[best]}, statistics.mean(runs[best])


def bench(name: str, work: Path, epochs: int, budget_s: float, goals: Goals, pairs: int = 0) -> None:
    config = write_config(work, name)
    base = {k: v for k, v in (PIPELINES[name].get("loader") or {}).items()
            if k in ("num_workers", "prefetch_factor", "persistent_workers", "pin_memory")}
    best, _ = grid_best(config, base, budget_s)
    print(f"{name}: {PIPELINES[name].get('about', '')}\n  grid's best: {best}", flush=True)
    first = run_child("plain", config, base, epochs, budget_s)
    runs: dict[str, list[dict[str, Any]]] = {"baseline": [first], "best": [], "tuned": [], "kept": []}
    runs["best"].append(run_child("plain", config, best, epochs, budget_s))
    runs["tuned"].append(run_child("tuned", config, base, epochs, budget_s))
    kept = runs["tuned"][0]["kept"]
    runs["kept"].append(run_child("plain", config, kept, epochs, budget_s))
    for mode, settings in (("kept", kept), ("tuned", base), ("best", best), ("baseline", base)):
        runs[mode].append(run_child("plain" if mode != "tuned" else "tuned", config, settings, epochs, budget_s))
    for i in range(pairs):  # more of the two the overhead compares, alternating
        for mode in (("tuned", "kept") if i % 2 == 0 else ("kept", "tuned")):
            runs[mode].append(run_child("plain" if mode != "tuned" else "tuned", config,
                                        base if mode == "tuned" else kept, epochs, budget_s))
    wall = {m: statistics.mean(r["wall_s"] for r in rs) for m, rs in runs.items()}
    tuned_runs = runs["tuned"]
    settled = [r["settled_s"] for r in tuned_runs]
    print("  walls: " + ", ".join(f"{m} {w:.1f} s" for m, w in wall.items())
          + f"; kept {kept} after {tuned_runs[0]['tried']} settings; settled at "
          + ", ".join("never" if s is None else f"{s:.1f} s" for s in settled), flush=True)
    after, overhead = [], []  # over the same epochs: those after the tuned run settled
    for r in tuned_runs:
        if r["settled_s"] is None:
            continue
        from_epoch = next(i + 1 for i, end in enumerate(r["ends"]) if end >= r["settled_s"])
        if from_epoch >= epochs:
            continue
        after.append(rate(r, from_epoch) / statistics.mean(rate(b, from_epoch) for b in runs["best"]))
        overhead.append(rate(r, from_epoch) / statistics.mean(rate(k, from_epoch) for k in runs["kept"]))
    goals.check(f"{name}: throughput after settling / the grid's best",
                statistics.mean(after) if after else None, ">=", GOAL_AFTER_SETTLING)
    limit = max(SETTLE_FLOOR_S, SETTLE_SHARE * wall["tuned"])
    goals.check(f"{name}: settled after (s)", max(settled) if None not in settled else None, "<=", limit,
                spec=".1f")
    saving = wall["baseline"] - wall["best"]
    if saving > MIN_SAVING * wall["baseline"]:
        goals.check(f"{name}: share of the best's saving the tuned run recovers",
                    (wall["baseline"] - wall["tuned"]) / saving, ">=", GOAL_RECOVERED)
    else:
        print(f"  the best saves {saving / wall['baseline']:.1%} of the baseline's wall: nothing to recover")
    spread = (f" (mean of {len(overhead)} tuned runs, each against the mean of {len(runs['kept'])} kept runs; "
              f"standard error {statistics.stdev(overhead) / len(overhead) ** 0.5:.3f})") if len(overhead) > 1 else ""
    goals.check(f"{name}: overhead after settling (tuned / kept)", statistics.mean(overhead) if overhead else None,
                ">=", GOAL_OVERHEAD, detail=spread)


# --- exactly once, and a failing setting -------------------------------------------------------------


def exactly_once(goals: Goals) -> None:
    done = subprocess.run([sys.executable, __file__, "--child-once"], capture_output=True, text=True, timeout=600)
    result = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else {}
    goals.require("every index once per epoch, in the sampler's order (1 rank)", bool(result.get("once")),
                  "each of 3 epochs holds every index once, in order", detail=f" ({result.get('switches')} switches)")
    goals.require("a setting whose workers raise is survived", bool(result.get("survived")),
                  "the run ends its epochs on the setting kept before")
    two_ranks(goals)


def indices(n: int, fail_with: int | None = None) -> Any:
    """A dataset whose sample i is i (0.5 ms each); with `fail_with`, its workers raise where there
    are that many or more."""
    import torch
    from torch.utils.data import Dataset, get_worker_info

    class Indices(Dataset):
        def __len__(self) -> int:
            return n

        def __getitem__(self, i: int) -> Any:
            info = get_worker_info()
            if fail_with is not None and info is not None and info.num_workers >= fail_with:
                raise ValueError("this setting fails")
            time.sleep(0.0005)
            return torch.tensor(i)

    return Indices()


def short_windows() -> None:
    from loadtune.training_process import tune as tune_module

    tune_module.MIN_WINDOW_S, tune_module.WINDOWS_IN_BUDGET = CHECK_WINDOW_S, 10**6  # many switches


def child_once() -> dict[str, Any]:
    """A tuned run that switches several times mid-epoch (short windows), and one whose workers raise."""
    from torch.utils.data import DataLoader

    import loadtune

    short_windows()
    tuned = loadtune.tune(DataLoader(indices(2000), batch_size=8), out=Path(tempfile.mkdtemp()) / "once.csv",
                          budget_s=100)
    epochs = [[int(x) for b in tuned for x in b] for _ in range(CHECK_EPOCHS)]
    switches = len(tuned.tuner.tried)
    tuned.close()
    once = all(e == list(range(2000)) for e in epochs) and switches >= CHECK_MIN_SWITCHES
    failing = loadtune.tune(DataLoader(indices(400, fail_with=1), batch_size=8),
                            out=Path(tempfile.mkdtemp()) / "fail.csv", budget_s=100)
    survived = all(sorted(int(x) for b in failing for x in b) == list(range(400)) for _ in range(2))
    failing.close()
    return {"once": once, "switches": switches, "survived": survived}


# --- 2 ranks ----------------------------------------------------------------------------------------


def two_ranks(goals: Goals) -> None:
    """The tuned run of indices on 2 ranks (child_rank each): every index each rank's sampler gives
    once per epoch in its order, both shares the whole dataset, and the same switches on both."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = Path(tempfile.mkdtemp()) / "ranks.csv"
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(RANKS),
           "TORCHELASTIC_RUN_ID": uuid.uuid4().hex, "OMP_NUM_THREADS": "1"}
    ranks = [subprocess.Popen([sys.executable, __file__, "--child-rank", str(out)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env={**env, "RANK": str(r), "LOCAL_RANK": str(r)})
             for r in range(RANKS)]
    results: list[dict[str, Any]] = []
    try:
        for rank in ranks:
            stdout, stderr = rank.communicate(timeout=RANKS_TIMEOUT_S)
            if rank.returncode == 0:
                results.append(json.loads(stdout.strip().splitlines()[-1]))
            else:
                print(f"  a rank failed: {stderr.strip().splitlines()[-1:]}", flush=True)
    finally:
        for rank in ranks:
            if rank.poll() is None:
                rank.kill()
                rank.wait()
    ran = len(results) == RANKS
    once = ran and all(e["got"] == e["order"] for r in results for e in r["epochs"]) and \
        all(sorted(i for r in results for i in r["epochs"][e]["got"]) == list(range(RANK_SAMPLES))
            for e in range(CHECK_EPOCHS))
    goals.require("every index once per epoch, in each rank's sampler order (2 ranks)", once,
                  "each of 3 epochs holds each rank's share once, in its order, the shares the whole dataset")
    seen = [switch_points(r["epochs"]) for r in results]
    same = ran and seen[0] == seen[1] and len(seen[0]) - 1 >= CHECK_MIN_SWITCHES
    goals.require("both ranks switch at the same batches to the same settings (2 ranks)", same,
                  f"the same (epoch, batch, settings) of each switch on both ranks, at least {CHECK_MIN_SWITCHES}",
                  detail=f" ({len(seen[0]) - 1 if seen else 0} switches on rank 0)")


def switch_points(epochs: list[dict[str, Any]]) -> list[tuple[int, int, str]]:
    """(epoch, batch, settings) where a rank's settings changed, its first batch included."""
    found: list[tuple[int, int, str]] = []
    for e, epoch in enumerate(epochs):
        for b, settings in enumerate(epoch["settings"]):
            if not found or settings != found[-1][2]:
                found.append((e, b, settings))
    return found


def child_rank(out: str) -> dict[str, Any]:
    """One rank (env://, as torchrun starts it): a tuned loader over its DistributedSampler's share,
    in step with the other rank (an all-reduce each batch, as DDP's gradients); each epoch's order,
    the indices served and the settings of each batch."""
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler

    import loadtune

    short_windows()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    data = indices(RANK_SAMPLES)
    sampler = DistributedSampler(data, shuffle=True, seed=1)
    tuned = loadtune.tune(DataLoader(data, batch_size=RANK_BATCH, sampler=sampler), out=out, budget_s=100)
    tick, epochs = torch.ones(1), []
    for epoch in range(CHECK_EPOCHS):
        sampler.set_epoch(epoch)
        order, got, settings = list(sampler), [], []
        for batch in tuned:
            got += [int(x) for x in batch]
            settings.append(json.dumps(tuned.settings, sort_keys=True))
            dist.all_reduce(tick)
        epochs.append({"order": order, "got": got, "settings": settings})
    tried = [t.settings for t in tuned.tuner.tried]
    tuned.close()
    dist.destroy_process_group()
    return {"epochs": epochs, "tried": tried}


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        mode, config, settings, epochs, budget = sys.argv[2:7]
        print(json.dumps(child(mode, Path(config), json.loads(settings), int(epochs), float(budget))))
        return 0
    if len(sys.argv) > 1 and sys.argv[1] in ("--child-once", "--child-rank"):
        print(json.dumps(child_once() if sys.argv[1] == "--child-once" else child_rank(sys.argv[2])))
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pipelines", default=",".join(DEFAULT))
    parser.add_argument("--epochs", type=int, default=EPOCHS)
    parser.add_argument("--budget", type=float, default=BUDGET_S)
    parser.add_argument("--pairs", type=int, default=0,
                        help="more (tuned, kept) runs, alternating, for a finer overhead figure")
    parser.add_argument("--only-checks", action="store_true",
                        help="only the checks on the dataset of indices (1 and 2 ranks, a failing setting)")
    args = parser.parse_args()
    names = [] if args.only_checks else list(PIPELINES) if args.pipelines == "all" else args.pipelines.split(",")
    print(machine_line(), flush=True)
    goals = Goals()
    with tempfile.TemporaryDirectory() as work:
        for name in names:
            bench(name, Path(work), args.epochs, args.budget, goals, args.pairs)
    exactly_once(goals)
    return goals.exit_status()


if __name__ == "__main__":
    sys.exit(main())
