"""Two DataLoader settings head to head over data-parallel ranks: the neutral referee for ranks.

plain_loop.py's counterpart for R ranks. Reads a loadtune config for its dataset factory, loader
baseline, step and measure block, and runs settings A and B (DataLoader keyword overrides over
the config's loader block) in rounds of alternating order, A B, B A, A B, ... (ABBA). Every run is
a fresh process group: R fresh Python processes (this script again, with --rank), each in its own
session, meeting over gloo on 127.0.0.1 at a free port. Each rank takes one intra-op thread (unless
OMP_NUM_THREADS is set, as under torchrun), builds the dataset, a DistributedSampler (the loader's
`shuffle` moved into it, `set_epoch` at every epoch) and `DataLoader(dataset, sampler=..., **settings)`,
and runs the config's step then an all-reduce of one float, as DDP's gradient all-reduce keeps
ranks in step. A new iterator at the end of each rank's share of the dataset (or every
`measure.epoch_batches`); `measure.warmup_batches` plus 2 per worker (none for workers that are
not persistent when an epoch is no longer than the window, as plain_loop.py) are not counted,
counted by batches so that every rank runs the same collectives; then `measure.batches` batches
are timed between two barriers. A run's figure is the samples of all ranks over rank 0's time
between the barriers. A run that fails or passes its timeout counts as None; its processes,
DataLoader workers included, are killed by session.

The ratio A/B is taken per round (one A and one B run); its estimate is the geometric mean of
those ratios, with a 95% Student t interval on their logarithms (n - 1 degrees of freedom).
Nothing of loadtune is used (a config may name a loadtune dataset factory; PYTHONPATH then holds
the checkout). DistributedSampler needs a dataset with a length (no IterableDataset).

No goal of its own: it is the referee transfer.py judges ranks with, and exits 0 once it has
printed the ratio (n/a when no round finished).

    python benchmarks/ranked_referee.py CONFIG.yaml '{"num_workers": 0}' \\
        '{"num_workers": 1, "persistent_workers": true}' --ranks 2 --rounds 4
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable

import yaml

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

from plain_loop import build_step, load_callable, loader_kwargs, samples_in

WARMUP_PER_WORKER = 2
# Student t 0.975 quantiles for 1..30 degrees of freedom; beyond, a Cornish-Fisher expansion.
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
        2.045, 2.042)


@dataclass
class RefereeResult:
    ratio: float | None  # A / B: geometric mean of the rounds' ratios
    low: float | None  # 95% t interval on the log ratios; None with fewer than 2 rounds done
    high: float | None
    a_runs: list[float | None]
    b_runs: list[float | None]
    ranks: int
    rounds: int


def t975(df: int) -> float:
    if df <= len(T975):
        return T975[df - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def rank_main(config: Path, settings: dict[str, Any], rank: int, world: int, port: int, timeout_s: float) -> None:
    """One rank of one run; rank 0 prints the run's JSON line."""
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler

    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=timeout_s))
    cfg = yaml.safe_load(config.read_text())
    dataset = load_callable(cfg["dataset"]["factory"], config.parent)(**(cfg["dataset"].get("kwargs") or {}))
    step = build_step(cfg["step"], config.parent)
    kwargs = loader_kwargs(dict(cfg.get("loader") or {}), settings)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=bool(kwargs.pop("shuffle", False)))
    loader = DataLoader(dataset, sampler=sampler, **kwargs)
    measure = cfg.get("measure") or {}
    warmup = max(int(measure.get("warmup_batches", 5)), 1)
    batches = int(measure.get("batches", 50))
    epoch = len(loader)  # the same on every rank: DistributedSampler pads to equal shares
    if measure.get("epoch_batches") is not None:
        epoch = min(epoch, int(measure["epoch_batches"]))
    workers = int(kwargs.get("num_workers") or 0)
    extra = 0 if not kwargs.get("persistent_workers") and epoch <= batches else WARMUP_PER_WORKER * workers
    state: dict[str, Any] = {"it": None, "in_epoch": 0, "epoch": 0}
    tick = torch.ones(1)

    def step_once() -> int:
        if state["it"] is None or state["in_epoch"] == epoch:
            state["it"] = None  # the old iterator shuts its workers down, as a training loop's would
            sampler.set_epoch(state["epoch"])
            state["it"], state["in_epoch"], state["epoch"] = iter(loader), 0, state["epoch"] + 1
        batch = next(state["it"])
        state["in_epoch"] += 1
        step(batch)
        dist.all_reduce(tick)  # as DDP's gradient all-reduce: the ranks step together
        return samples_in(batch)

    for _ in range(warmup + extra):
        step_once()
    dist.barrier()
    start = time.perf_counter()
    samples = sum(step_once() for _ in range(batches))
    dist.barrier()
    seconds = time.perf_counter() - start
    total = torch.tensor([float(samples)])
    dist.all_reduce(total)
    state["it"] = None
    if rank == 0:
        print(json.dumps({"samples_per_s": total.item() / seconds, "seconds": seconds, "batches": batches,
                          "ranks": world, "torch_threads": torch.get_num_threads(), "loader": kwargs}, default=str),
              flush=True)
    dist.destroy_process_group()


def show(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ranked_run(config: Path, settings: dict[str, Any], ranks: int, timeout_s: float = 300.0,
               log: Callable[[str], None] = print) -> float | None:
    """Samples/s over all ranks of one fresh process group, or None when it failed or timed out."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="ranked-referee-") as tmp:
        outs = [open(Path(tmp) / f"rank{r}.out", "w+") for r in range(ranks)]
        errs = [open(Path(tmp) / f"rank{r}.err", "w+") for r in range(ranks)]
        procs = [subprocess.Popen([sys.executable, str(Path(__file__).resolve()), str(config), json.dumps(settings),
                                   "--rank", str(r), "--world", str(ranks), "--port", str(port),
                                   "--timeout", str(timeout_s)],
                                  env=env, stdout=outs[r], stderr=errs[r], start_new_session=True)
                 for r in range(ranks)]
        deadline, why = time.monotonic() + timeout_s, ""
        while any(p.poll() is None for p in procs):
            if any(p.returncode not in (None, 0) for p in procs):
                why = "a rank failed"
                break
            if time.monotonic() > deadline:
                why = f"timed out after {timeout_s:.0f} s"
                break
            time.sleep(0.05)
        for p in procs:  # each rank's session: the rank and its DataLoader workers
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
        if not why and any(p.returncode != 0 for p in procs):
            why = "a rank failed"
        result = None
        if not why:
            outs[0].seek(0)
            lines = outs[0].read().strip().splitlines()
            result = float(json.loads(lines[-1])["samples_per_s"]) if lines else None
            why = "" if lines else "rank 0 printed nothing"
        if why:
            bad = [r for r, p in enumerate(procs) if p.returncode not in (0, -signal.SIGKILL)] or [0]
            errs[bad[0]].seek(0)
            tail = errs[bad[0]].read().strip().splitlines()[-1:]
            log(f"    run failed ({why}): {json.dumps(settings)}; rank {bad[0]}: {tail}")
        for f in outs + errs:
            f.close()
    return result


def referee(config: Path, a: dict[str, Any], b: dict[str, Any], ranks: int, rounds: int, timeout_s: float = 300.0,
            log: Callable[[str], None] = print) -> RefereeResult:
    """A and B in `rounds` rounds of ABBA order, each run a fresh group of `ranks` processes."""
    config = Path(config).resolve()
    a_runs: list[float | None] = []
    b_runs: list[float | None] = []
    for r in range(rounds):
        order = [("A", a, a_runs), ("B", b, b_runs)]
        for _, settings, runs in order if r % 2 == 0 else order[::-1]:
            runs.append(ranked_run(config, settings, ranks, timeout_s, log))
        log(f"  round {r + 1} ({'AB' if r % 2 == 0 else 'BA'}): A {show(a_runs[-1])}, B {show(b_runs[-1])} samples/s")
    logs = [math.log(x / y) for x, y in zip(a_runs, b_runs) if x is not None and y is not None and x > 0 and y > 0]
    ratio = low = high = None
    if logs:
        mean = sum(logs) / len(logs)
        ratio = math.exp(mean)
        if len(logs) >= 2:
            sd = math.sqrt(sum((v - mean) ** 2 for v in logs) / (len(logs) - 1))
            half = t975(len(logs) - 1) * sd / math.sqrt(len(logs))
            low, high = math.exp(mean - half), math.exp(mean + half)
    return RefereeResult(ratio, low, high, a_runs, b_runs, ranks, rounds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", type=Path, help="a loadtune config (YAML)")
    parser.add_argument("a", type=json.loads, help="settings A over the config's loader block, as a JSON object")
    parser.add_argument("b", type=json.loads, nargs="?", help="settings B, as a JSON object")
    parser.add_argument("--ranks", type=int, default=2, help="ranks in each run's process group")
    parser.add_argument("--rounds", type=int, default=4, help="rounds, each one run of A and one of B")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per run before it counts as failed")
    parser.add_argument("--rank", type=int, help=argparse.SUPPRESS)  # a rank of one run, started by the referee
    parser.add_argument("--world", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank is not None:
        rank_main(args.config.resolve(), args.a, args.rank, args.world, args.port, args.timeout)
        return 0
    if args.b is None or args.ranks < 1 or args.rounds < 1:
        parser.error("give settings A and B, --ranks and --rounds of 1 or more")
    print(f"A = {json.dumps(args.a)}, B = {json.dumps(args.b)}: {args.ranks} ranks, {args.rounds} rounds (ABBA)",
          flush=True)
    res = referee(args.config, args.a, args.b, args.ranks, args.rounds, args.timeout,
                  log=lambda line: print(line, flush=True))
    interval = "n/a" if res.low is None else f"{res.low:.3f}-{res.high:.3f}"
    ratio = "n/a" if res.ratio is None else f"{res.ratio:.3f}"
    print(f"A/B: {ratio} (geometric mean over rounds; 95% t interval on log ratios {interval})")
    print(json.dumps(asdict(res)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
