"""`loadtune.tune(loader)`: the loader a training loop already has, its settings tried in the real
run and the best kept (docs/tune.md).

The loop iterates what `tune` returns as it iterated the loader. Each setting the search
(training_process.tuner) asks for runs as a loader of its own over the same dataset
(training_process.switching: mid-epoch, on the batches not yet handed, so each sample comes once),
watched as `loadtune watch` watches a loader: each setting tried leaves a row with status `tuned`,
the kept one a `watched` row for the rest of the run. A setting that fails (a worker that raises or
dies, shared memory full) hands the batch it was fetching to the setting kept so far, and the run
goes on.

Under torchrun (a process group with ranks, and its store: run.job.group, as it is when `tune` is
called) rank 0 alone searches, and every rank changes setting at the same batch of the same epoch
as rank 0's word says (switching.Agreement: the word passes through the job's store, outside the
training's collectives, and only while the search runs). A setting that fails on rank 0 is left
by every rank at the next batch; one that fails on another rank alone is left by that rank for
the one it ran before, for the rest of the run. Ranks without a process group each tune on their
own.
"""

from __future__ import annotations

import logging
import math
import os
import re
from typing import Any, Iterator, Mapping, Sequence

from loadtune.core.errors import ConfigError, LoadtuneError
from loadtune.core.kinds import TOLERANCE
from loadtune.measure.cpu import outside_since
from loadtune.measure.loop import WarmUp, batch_len
from loadtune.measure.machine import usable_cores
from loadtune.model.predict import forecast
from loadtune.parts.device import is_accelerator, resolve_device
from loadtune.record.settings import config_name, dataloader_line
from loadtune.record.watched import WORKERS_PER_CORE, WORKERS_TRIED_AT_LEAST
from loadtune.training_process.hook import own
from loadtune.training_process.probe import loader_settings
from loadtune.training_process.run import RunWatch, checked_seconds, default_name, run_for, script_name
from loadtune.training_process.switching import (
    TUNABLE,
    Agreement,
    Child,
    Word,
    child_loader,
    draw_order,
    mid_epoch,
    settings_of,
)
from loadtune.training_process.tuner import Limits, Tuner
from loadtune.training_process.watch import LoaderWatch, warm_up_rule
from loadtune.training_process.watched import InTheRun

DEFAULT_BUDGET_S = 60.0
WINDOWS_IN_BUDGET = 12  # each setting's window is budget_s / WINDOWS_IN_BUDGET ...
MIN_WINDOW_S = 1.0  # ... and at least this long
MEMORY_LEFT_FREE = 0.10  # workers are not added where they would leave less of the memory free
AGREE_PREFIX = "loadtune-tune"  # the ranks' words in the job's store: AGREE_PREFIX:run:restart:file:loader:n


class Tuned(InTheRun):
    """Iterates as `loader` does (and has its length and attributes), on the settings the search
    asks for; `settings` is the setting it runs now, `tuner` the search (on a rank other than 0,
    rank 0's choices), `ranks` how the job's ranks agree (None: this process decides alone)."""

    def __init__(self, loader: Any, run: RunWatch, name: str, tuner: Tuner) -> None:
        self.loader, self.run, self.name, self.tuner = loader, run, name, tuner
        self.switching = mid_epoch(loader)
        self.start_settings = settings_of(loader)
        self._child: Child | None = None
        self._watch: LoaderWatch | None = None
        self._pending = False  # an iterable dataset's switch, waiting for the epoch's end
        self.ranks = agreement_for(run, name, tuner.current)  # None: this process decides alone
        how = ("the epoch's order is drawn once and each setting takes the batches not yet handed: settings "
               "change mid-epoch, each sample once") if self.switching else \
            "an iterable dataset: settings change at epoch ends"
        if self.ranks is None or self.ranks.leads:
            run.tell(f"loadtune: tuning {name} from {config_name(self.start_settings)}: {how}"
                     + ranks_line(run, self.ranks))

    def __iter__(self) -> Iterator[Any]:
        return self._epoch()

    @property
    def settings(self) -> dict[str, Any]:
        return dict(self.tuner.current)

    def label(self, settings: Mapping[str, Any]) -> str:
        """A setting named by what differs from the loader's own ("baseline": none)."""
        return config_name(settings, baseline=self.start_settings)

    # --- the loop ---------------------------------------------------------------------------

    def _epoch(self) -> Iterator[Any]:
        order = draw_order(self.loader) if self.switching else None
        if self.ranks is not None:
            self.ranks.epoch += 1
        clock = self.run.clock
        handed = 0  # this epoch's batches handed: where every rank switches
        while True:
            child, watch = self._use(self.tuner.current)
            inner = watch.iterate(lambda: child.start(order))
            if self.tuner.settled and (self.ranks is None or self.ranks.done):  # the kept setting from now on
                yield from inner
                return
            last: tuple[float, int] | None = None  # the last batch's wait and samples
            handed_at = 0.0
            while True:
                asked = clock()
                if last is not None and self._next(handed, last[0], asked - handed_at, last[1]):
                    break
                try:
                    batch = next(inner)
                except StopIteration:
                    if self._pending:
                        self._pending = False
                        self._use(self.tuner.current)
                    return
                except Exception as exc:  # noqa: BLE001 - a setting that fails falls back, or the loop sees it
                    if not self._fall_back(exc):
                        raise
                    break
                got = clock()
                handed += 1
                if order is not None:
                    order.handed += 1
                last = (got - asked, batch_len(batch, self.loader.batch_size or 1))
                handed_at = clock()
                yield batch

    def _next(self, batch: int, wait_s: float, step_s: float, samples: int) -> bool:
        """The step of this epoch's batch `batch` ended; True when the loop switches settings now:
        as this process's search says (rank 0's posted for the other ranks), or as rank 0's word says."""
        ranks = self.ranks
        if ranks is not None and not ranks.leads:
            return self._follow(ranks, batch)
        switch = self._after(wait_s, step_s, samples)
        if ranks is not None and not ranks.done:
            try:
                ranks.post(batch, Word(dict(self.tuner.current), switch or self._pending, self.tuner.settled))
            except Exception as exc:  # noqa: BLE001 - the store gone: each rank keeps what it runs
                self.ranks = None
                self.run.tell(f"loadtune: {self.name}: rank 0's word after batch {batch} could not be posted "
                              f"({failure_line(exc)}): the other ranks keep their settings", logging.WARNING)
        return switch

    def _follow(self, ranks: Agreement, batch: int) -> bool:
        """Another rank of the job: rank 0's word after this epoch's batch `batch`, done; True when
        the loop switches settings now."""
        if ranks.done:
            return False
        try:
            word = ranks.read(batch)
        except Exception as exc:  # noqa: BLE001 - no word within the store's timeout, or the store gone
            self.ranks = None
            self.tuner.follow(self.tuner.current, settled=True)
            self.run.tell(f"loadtune: {self.name}: rank {ranks.rank}: no word from rank 0 after batch {batch} "
                          f"({failure_line(exc)}): this rank keeps {self.label(self.tuner.current)} and tunes no "
                          "more", logging.WARNING)
            return False
        if ranks.failed is not None:  # back on its own: at the settled word, rank 0's kept where it ran here
            if not word.settled:
                return False
            word = Word(word.settings if ranks.ran_here(word.settings) else self.tuner.current, True, True)
        elif not word.switch and (word.settings, word.settled) == (self.tuner.current, self.tuner.settled):
            return False
        if word.settings != ranks.ran[-1]:
            ranks.ran.append(dict(word.settings))
        self.tuner.follow(word.settings, word.settled)
        return self._switch_now()

    def _after(self, wait_s: float, step_s: float, samples: int) -> bool:
        """One batch's step ended; True when the loop switches settings now."""
        settled = self.tuner.settled
        if not self.tuner.add(wait_s, step_s, samples):
            return False
        judged = self.tuner.tried[-1]
        self.run.tell(f"loadtune: {self.name}: {self.label(judged.settings)}: {judged.samples_per_s:,.0f} samples/s, "
                      f"wait ratio {judged.wait_ratio:.2f}" + (" (kept so far)" if judged is self.tuner.kept else ""))
        if len(self.tuner.tried) == 1 and not self.tuner.settled:
            self._suggest()
        if self.tuner.settled and not settled:
            self._settled()
        return self._switch_now()

    def _switch_now(self) -> bool:
        """A new setting is due: True where the loop switches now (mid-epoch); an iterable
        dataset's waits for the epoch's end."""
        if not self.switching:
            self._pending = True
            return False
        return True

    def _suggest(self) -> None:
        """The pipeline model fitted to the start's window (its row, as `loadtune predict` reads a
        watched run) proposes what to try first."""
        watch = self._watch
        assert watch is not None
        watch.close()
        name = watch.name
        rows = [r for r in self.run.own_rows()[0] if r.trial == self.run.trial_name(name)]
        try:
            ranked = forecast(rows).rows
        except LoadtuneError as exc:
            self.run.tell(f"loadtune: {self.name}: the pipeline model could not be fitted ({exc}); trying one change "
                          "at a time")
            return
        self.tuner.suggest([row.settings for row in ranked])
        self.run.tell(f"loadtune: {self.name}: the pipeline model, fitted to the start's window, suggests "
                      + (", then ".join(self.label(s) for s in self.tuner.pending) or "nothing new"))

    def _fall_back(self, exc: BaseException) -> bool:
        if self.ranks is not None and not self.ranks.leads:
            return self._fall_back_here(self.ranks, exc)
        reason = failure_line(exc)
        failing = dict(self.tuner.current)
        if not self.tuner.failed(reason):
            return False
        self._drop(reason)
        self.run.tell(f"loadtune: {self.name}: {self.label(failing)} failed ({reason}); back to "
                      f"{self.label(self.tuner.current)}, the run goes on", logging.WARNING)
        self._settled()
        return True

    def _fall_back_here(self, ranks: Agreement, exc: BaseException) -> bool:
        """Another rank's setting failed here: this rank goes back to the one it ran before, while
        rank 0 goes on choosing the other ranks' settings; when rank 0 settles, this rank keeps
        rank 0's kept setting where it ran here, else its own. A second failure, or one of the
        rank's first setting or of the one settled on, is the loop's own error."""
        if len(ranks.ran) < 2 or ranks.failed is not None or self.tuner.settled:
            return False
        reason, failing = failure_line(exc), dict(self.tuner.current)
        self._drop(reason)
        ranks.failed = ranks.ran.pop()
        before = ranks.ran[-1]
        self.tuner.follow(before, settled=False)
        self.run.tell(f"loadtune: {self.name}: rank {ranks.rank}: {self.label(failing)} failed on this rank "
                      f"({reason}); back to {self.label(before)} on this rank, the run goes on (when rank 0 settles, "
                      "this rank keeps rank 0's setting where it ran here, else its own)", logging.WARNING)
        return True

    def _drop(self, reason: str) -> None:
        """The setting in use ends: its watch closed with `reason`, its workers shut down."""
        if self._watch is not None:
            self._watch.close(reason)
        if self._child is not None:
            self._child.stop()
        self._child = None

    def release(self) -> None:
        """The run is over (a trainer's training ended): the workers of the setting in use shut
        down now, not when the loader goes; iterated again, it starts them anew."""
        if self._child is not None:
            self._child.stop()
        self._child = None

    def _settled(self) -> None:
        tuner = self.tuner
        kept, first = tuner.kept, next((t for t in tuner.tried if not t.failed), None)
        assert kept is not None and first is not None
        gain = kept.samples_per_s / first.samples_per_s if first.samples_per_s else math.nan
        notes = "; ".join(tuner.notes)
        paste = dataloader_line({**loader_settings(self.loader), **tuner.current})
        self.run.tell(f"loadtune: {self.name}: keeps {self.label(tuner.current)} after {len(tuner.tried)} settings "
                      f"in {self.run.clock() - tuner.started:.0f} s: {kept.samples_per_s:,.0f} samples/s, "
                      f"{gain:.2f}x the start's {first.samples_per_s:,.0f}" + (f" ({notes})" if notes else "")
                      + f". In the script: {paste}")

    def _use(self, settings: Mapping[str, Any]) -> tuple[Child, LoaderWatch]:
        """The loader of `settings` and its watch: the one in use while it is the same and the
        search has not settled on it; else a new one (the old one's workers shut down)."""
        keep = self._child is not None and self._child.settings == dict(settings)
        kept_row = self.tuner.settled
        if keep and self._watch is not None and (self._watch.name not in self.run.loaders.tuned) == kept_row:
            assert self._child is not None
            return self._child, self._watch
        if self._watch is not None:
            self._watch.close()
        if not keep:
            if self._child is not None:
                self._child.stop()
            self._child = child_loader(self.loader, settings, self.switching)
            own(self._child.loader)  # iterated as it is, never tuned or watched again by the hook
        assert self._child is not None
        name = self.name if kept_row else f"{self.name}: {self.label(settings)}"
        watch = self.run.watch(self._child.loader, name, fresh=True)
        if not kept_row:
            self.run.loaders.tuned.add(watch.name)
        self._watch = watch
        return self._child, watch


def agreement_for(run: RunWatch, name: str, start: Mapping[str, Any]) -> Agreement | None:
    """How the ranks of the job agree on `name`'s settings (None: this process decides alone): by
    the job's store where there are ranks and a process group (run.job.group, as it is now), under
    keys of this run (torchrun's run id and restart, the results file) and this loader (its name
    and how many of that name this run made before it: the same on every rank)."""
    run.refresh_group()
    group, made = run.job.group, run.loaders.tuned_made
    made[name] = made.get(name, 0) + 1
    if group.world <= 1 or group.store is None:
        return None
    job = f"{os.environ.get('TORCHELASTIC_RUN_ID', '')}:{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    return Agreement(group.store, group.rank, group.world, f"{AGREE_PREFIX}:{job}:{run.out.name}:{name}:{made[name]}",
                     ran=[dict(start)])


def ranks_line(run: RunWatch, ranks: Agreement | None) -> str:
    """What the first line says of the job's ranks ("" for one process)."""
    group = run.job.group
    if ranks is not None:
        return (f"; on {group.world} ranks, rank 0 searches and every rank changes setting at the same batch "
                "(rank 0's word passes through the job's store)")
    if group.world > 1:
        return f"; rank {group.rank} of {group.world} without a process group: each rank tunes on its own"
    return ""


def failure_line(exc: BaseException) -> str:
    """An exception in one line: a worker's (torch wraps it: "Caught ValueError in DataLoader
    worker process 0." then the worker's traceback) by the worker's own error line, with where
    loadtune's note on the fetch says it happened."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].startswith("Caught ") and "worker" in lines[0]:
        error = next((line for line in reversed(lines) if re.match(r"[A-Za-z_][\w.]*(Error|Exception)\b", line)),
                     lines[0])
        where = next((line.removeprefix("[loadtune] ") for line in lines if line.startswith("[loadtune] ")), "")
        return f"{error} ({where + ', ' if where else ''}in a worker)"
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def room_for(added: int) -> str:
    """Why `added` more workers would not fit in memory ("" where they would): each as large as
    this process's largest worker now (else a quarter of this process), leaving MEMORY_LEFT_FREE."""
    import psutil  # type: ignore[import-untyped]

    me = psutil.Process()
    try:
        sizes = [c.memory_full_info().uss for c in me.children(recursive=True)]
    except psutil.Error:
        sizes = []
    each = max(sizes) if sizes else me.memory_info().rss / 4
    memory = psutil.virtual_memory()
    need = added * each
    if memory.available - need >= MEMORY_LEFT_FREE * memory.total:
        return ""
    return (f"{added} more workers would need about {need / 2**30:.1f} GiB, leaving less than "
            f"{MEMORY_LEFT_FREE:.0%} of the memory free ({memory.available / 2**30:.1f} GiB available)")


def tune(loader: Any, *, out: str | os.PathLike[str] | None = None, budget_s: float = DEFAULT_BUDGET_S,
         name: str | None = None, tune: Sequence[str] | None = None) -> Tuned:
    """`for batch in loadtune.tune(loader): ...` (docs/tune.md)."""
    from torch.utils.data import DataLoader

    if not isinstance(loader, DataLoader):
        raise ConfigError(f"loadtune.tune: {type(loader).__name__} is not a DataLoader: pass the DataLoader")
    budget_s = checked_seconds(budget_s, "budget_s", "loadtune.tune")
    allowed = tuple(TUNABLE if tune is None else tune)
    unknown = [k for k in allowed if k not in TUNABLE]
    if unknown:
        raise ConfigError(f"loadtune.tune: tune= may list {', '.join(TUNABLE)}; not {', '.join(unknown)}")
    run = run_for(out, DEFAULT_BUDGET_S, name or script_name())
    return tuned_for(loader, run, name or "loader", budget_s, allowed)


def tuned_for(loader: Any, run: RunWatch, name: str | None = None, budget_s: float = DEFAULT_BUDGET_S,
              allowed: Sequence[str] = TUNABLE) -> Tuned:
    """`loader` tuned into `run` (`loadtune.tune`; `loadtune watch --tune` for each loader a script
    iterates, named after its dataset)."""
    try:
        epoch: int | None = len(loader)
    except TypeError:  # an iterable dataset without a length
        epoch = None

    def warmup(settings: Mapping[str, Any]) -> WarmUp:
        return warm_up_rule(run.clock, int(settings.get("num_workers") or 0), bool(settings.get("persistent_workers")),
                            epoch)

    cores = usable_cores()
    most = max(WORKERS_TRIED_AT_LEAST, WORKERS_PER_CORE * cores)  # as record.watched.default_sweep
    limits = Limits(tuple(allowed), most, is_accelerator(resolve_device("auto")), budget_s,
                    max(MIN_WINDOW_S, budget_s / WINDOWS_IN_BUDGET), TOLERANCE)
    # The job's other ranks on this machine are not this process's tree: what they use is no neighbour's.
    alone = int(os.environ.get("LOCAL_WORLD_SIZE") or os.environ.get("WORLD_SIZE") or 1) <= 1
    tuner = Tuner(settings_of(loader), limits, run.clock, warmup, room_for,
                  outside=(lambda: outside_since(cores)) if alone else None)
    return Tuned(loader, run, name or default_name(loader, len(run.loaders.watches)), tuner)

