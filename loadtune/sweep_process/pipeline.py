"""A whole sweep, wired (hyperfine's main): setup -> plan and measure (a strategy choosing
trials, the runner racing their repeats) -> conclude -> the result. Each stage is a module of
its own; this one only joins them, with the output checked writable and locked first."""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path
from typing import ContextManager, Sequence

from loadtune.asked.config import RunSpec
from loadtune.asked.options import SweepOptions
from loadtune.asked.plan import ideal_trial
from loadtune.asked.trials import IDEAL, Trial
from loadtune.core.errors import OutputExists
from loadtune.core.kinds import Strategy
from loadtune.decide.selection import Scored
from loadtune.present.sweep import SweepResult
from loadtune.sweep_process import events
from loadtune.sweep_process.conclude import conclude, raced, write_result
from loadtune.sweep_process.files import OutputLock, SweepFiles, check_writable
from loadtune.sweep_process.launch import run_in_trial_process
from loadtune.sweep_process.racer import Executor, Racer, RaceSettings
from loadtune.sweep_process.setup import MEASURE_SHM, Setup, prepare
from loadtune.sweep_process.strategy import Search, run_strategy


def run_sweep(options: SweepOptions, *, spec: RunSpec | None = None, on_event: events.OnEvent = events.ignore,
              execute: Executor = run_in_trial_process, shm_free_mb: float | None | str = MEASURE_SHM,
              setup: Setup | None = None) -> SweepResult:
    """Run a whole sweep and write its CSV. `spec`: the options' config, when already loaded.
    `execute` runs each trial job (see Executor); `shm_free_mb` is the free /dev/shm the trials
    are checked against (MEASURE_SHM: read it now; None: not checked); `setup`, when given,
    stands for preflight and the machine (tests). An existing output is refused (OutputExists)
    unless the options resume it or overwrite it."""
    spec = spec if spec is not None else options.spec()
    out_path = options.out_path(spec)
    refuse_existing(options, out_path)
    check_writable(out_path)
    with OutputLock(out_path):
        setup = setup if setup is not None else prepare(options, spec, on_event, shm_free_mb)
        files = SweepFiles.open(out_path, setup.spec, setup.context["host"], options.output.resume)
        # Files the ranks' launcher leaves, in a folder that goes when the sweep ends.
        with _scratch(setup.spec.ranks) as scratch:
            settings = RaceSettings(options.seed, options.rank_by, options.strategy == Strategy.MODEL, scratch,
                                    bounds=options.strategy == Strategy.MODEL)
            runner = Racer(setup, files, settings, emit=on_event, execute=execute)
            runner.resume(files.kept, files.kept_ranks)
            runner.restore(files.stored)
            on_event(events.SweepStarted(options.strategy, setup.device, setup.info.dataset_len, out_path,
                                         len(files.kept) + len(files.stored), files.older))
            measure_all(options, runner)
        result = conclude(options, raced(runner))
        write_result(files, result, runner.rank_records)
        on_event(events.SweepFinished(result.records))
        return result


def refuse_existing(options: SweepOptions, out_path: Path) -> None:
    """An earlier result is never replaced unasked: OutputExists unless resumed or overwritten."""
    if out_path.exists() and not options.output.resume and not options.output.overwrite:
        raise OutputExists(f"{out_path} already exists: add --resume to keep its rows and measure the rest, or "
                           "--overwrite to replace it")


def measure_all(options: SweepOptions, runner: Racer) -> None:
    """The strategy's rounds, the trials kept by --resume that it did not ask for again (taken up
    from their raw samples: see Racer.settle_pending), then the racing that settles the pick."""
    cfg = runner.setup.spec.config
    ideal = ideal_trial(cfg)

    def measure(trials: Sequence[Trial], round_no: int) -> dict[str, Scored]:
        # The ideal reference joins the first set measured, interleaved with it.
        extra = [ideal] if IDEAL not in runner.runs or runner.runs[IDEAL].pending else []
        return runner.measure([*extra, *trials], round_no)

    run_strategy(options.strategy, Search(cfg, runner.setup.accelerator, measure, options.rank_by,
                                          cfg.measure.tolerance, runner.model))
    runner.settle_pending()
    runner.race()


def _scratch(ranks: int) -> ContextManager[str | None]:
    """A folder for the files the ranks' launcher leaves (ranks only), removed after the sweep."""
    return tempfile.TemporaryDirectory(prefix="loadtune-") if ranks > 1 else contextlib.nullcontext()
