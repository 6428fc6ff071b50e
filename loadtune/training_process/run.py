"""A watched training run: its watched loaders, the results file written at every interval (so a
run that fails keeps the rows measured so far), the lines it says while it trains, and its ranks.

Under torch.distributed each rank watches its own loaders and posts its rows to the job's own
store (the process group's key-value store: no collective, so no rank waits for another at a
point the training does not), and rank 0 writes one file with a row per rank; at the end it waits
a little for the other ranks' last rows. A job whose ranks have no process group writes a file
per rank (NAME.rankR.csv).
"""

from __future__ import annotations

import atexit
import json
import logging
import math
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

from loadtune.core.errors import ConfigError
from loadtune.core.kinds import Status
from loadtune.core.text import output_width, wrap
from loadtune.decide.stats import window_figures
from loadtune.record.record import Record, ResultsFile
from loadtune.record.run_epochs import AS_MEASURED
from loadtune.record.samples import SamplesFile, TrialSamples, samples_file
from loadtune.record.watched import LoaderInfo, write_loader_info
from loadtune.training_process.rows import Observed, run_context, watched_record, watched_samples
from loadtune.training_process.tally import Clocks
from loadtune.training_process.watch import LoaderWatch, WatchHooks, WatchSampling

LOGGER = "loadtune.watch"
# Over the last interval, a wait ratio above this is worth a warning (the verdicts' own line
# between a loader that keeps up and one that does not).
WARN_WAIT_RATIO = 0.10
# A warning with the same verdict as the one before is said again after this many intervals.
WARN_REPEAT_INTERVALS = 10
# At the end, rank 0 waits at most this long for the other ranks' last rows.
FINAL_WAIT_S = 30.0
STORE_PREFIX = "loadtune-watch"
DEFAULT_FOLDER = "results"


def default_out(name: str) -> Path:
    """Where a watched run's rows go unless told: results/watch-NAME.csv."""
    stem = "".join(c if c.isalnum() or c in "-_." else "-" for c in name).strip("-.") or "run"
    return Path(DEFAULT_FOLDER) / f"watch-{stem}.csv"


class _Wrapped(logging.Formatter):
    """The message alone, wrapped as every command's prose is (text.wrap, at text.output_width)."""

    def format(self, record: logging.LogRecord) -> str:
        return "\n".join(wrap(super().format(record), output_width(sys.stderr)))


def logger() -> logging.Logger:
    """The run's lines go to the `loadtune.watch` logger; to stderr when nothing handles it."""
    log = logging.getLogger(LOGGER)
    if not log.hasHandlers():
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(_Wrapped())
        log.addHandler(handler)
        log.propagate = False
    if log.level == logging.NOTSET:
        log.setLevel(logging.INFO)
    return log


@dataclass
class _Group:
    """This process's place among the job's ranks."""

    rank: int = 0
    world: int = 1
    store: Any = None  # the process group's store; None: no process group

    @property
    def writes(self) -> bool:
        return self.rank == 0 or self.store is None


def _group() -> _Group:
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            rank, world = dist.get_rank(), dist.get_world_size()
            store = None
            if world > 1:
                from torch.distributed import distributed_c10d

                store = distributed_c10d._get_default_store()
            return _Group(rank, world, store)
    except Exception:  # noqa: BLE001 - no usable process group: as without one
        pass
    rank, world = int(os.environ.get("RANK", "0") or 0), int(os.environ.get("WORLD_SIZE", "1") or 1)
    return _Group(rank, world, None)


@dataclass
class _Job:
    """The job this process is part of: its ranks as last seen, when the run started, and the
    machine and run columns of its rows (once asked)."""

    group: _Group = field(default_factory=_Group)
    started_at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    context: dict[str, Any] | None = None


@dataclass
class _Loaders:
    """The loaders watched, in the order first seen: by id() and by name, and each one's last
    warning (its verdict and the interval it was said at)."""

    watches: list[LoaderWatch] = field(default_factory=list)
    by_id: dict[int, LoaderWatch] = field(default_factory=dict)
    names: set[str] = field(default_factory=set)
    warned: dict[str, tuple[str, int]] = field(default_factory=dict)
    tuned: set[str] = field(default_factory=set)  # the watches of settings a tuned run tried: rows `tuned`
    tuned_made: dict[str, int] = field(default_factory=dict)  # loadtune.tune's loaders made, by name (store keys)


@dataclass
class _Output:
    """Where the rows go and what was written: the results and samples files, where each file
    asked for went (_beside), each loader's intervals as kept in the samples file, the rows last
    written, and whether a write failed (said once)."""

    results: ResultsFile | None = None
    samples: SamplesFile | None = None
    files: dict[Path, Path] = field(default_factory=dict)
    parts: dict[str, dict[int, Any]] = field(default_factory=dict)
    written: list[Record] = field(default_factory=list)
    failed: bool = False


@dataclass
class RunWatch:
    """The watched loaders of this process, and where their rows go."""

    out: Path
    every_s: float
    script: str | None = None
    say: Callable[[str, int], None] | None = None  # (line, logging level); default: the logger
    sample_tree: bool = True
    clock: Callable[[], float] = time.perf_counter
    cpu_clock: Callable[[], float] = time.thread_time

    def __post_init__(self) -> None:
        self._lock = threading.RLock()
        self.job = _Job()
        self.loaders = _Loaders()
        self.output = _Output()
        self.ended: str | None = None  # how the run ended ("": by itself); None while it runs
        atexit.register(self.close)

    @property
    def closed(self) -> bool:
        return self.ended is not None

    @property
    def reason(self) -> str:
        """How the run ended, once closed."""
        return self.ended or ""

    # --- loaders ------------------------------------------------------------------------------

    def watch(self, loader: Any, name: str | None = None, fresh: bool = False) -> LoaderWatch:
        """The watch of `loader` (made on first sight, named `name` or after its dataset); `fresh`:
        a watch of its own whatever was watched before (each setting a tuned run tries)."""
        with self._lock:
            watches = self.loaders.watches
            found = self.loaders.by_id.get(id(loader))
            if found is not None and found.loader is loader and not fresh:
                return found
            again = None if fresh else \
                next((w for w in watches if (name is None or w.name == name) and w.same_loader(loader)), None)
            if again is not None:  # the same loader made again for a new epoch
                again.adopt(loader)
                self.loaders.by_id[id(loader)] = again
                return again
            hooks = WatchHooks(on_interval=self._interval, on_epoch=self.refresh_group)
            watch = LoaderWatch(loader, self._unique(name or default_name(loader, len(watches))),
                                self.every_s, hooks=hooks, clocks=Clocks(self.clock, self.cpu_clock),
                                sampling=WatchSampling(tree=self.sample_tree))
            self.loaders.by_id[id(loader)] = watch
            watches.append(watch)
            return watch

    def _unique(self, name: str) -> str:
        candidate, n = name, 1
        while candidate in self.loaders.names:
            n += 1
            candidate = f"{name} {n}"
        self.loaders.names.add(candidate)
        return candidate

    # --- as it runs ---------------------------------------------------------------------------

    def _interval(self, watch: LoaderWatch) -> None:
        with self._lock:
            if self.closed:
                return
            try:
                self.refresh_group()
                rows = self.write()
                if self.job.group.rank == 0 and watch.name not in self.loaders.tuned:  # a tuned run says its own
                    self._status(watch, rows)
            except Exception as exc:  # noqa: BLE001 - said once, never into the training loop
                if not self.output.failed:
                    self.output.failed = True
                    self.tell(f"loadtune: could not write {self.file}: {type(exc).__name__}: {exc}; the run goes on "
                              "and is written again at the next interval and at its end", logging.ERROR)

    def _status(self, watch: LoaderWatch, rows: Sequence[Record]) -> None:
        interval = watch.kept.last
        if interval is None:
            return
        wait_ratio, samples_per_s = window_figures_of(interval.window)
        row = next((r for r in rows if r.trial == self.trial_name(watch.name)), None)
        verdict = row.assessment.verdict if row is not None and row.assessment.verdict else "no verdict yet"
        self.tell(f"loadtune: {watch.name}: {samples_per_s:,.0f} samples/s, wait ratio {wait_ratio:.2f} "
                  f"({verdict}) over the last {_seconds(interval.end_s - interval.start_s)}")
        if wait_ratio > WARN_WAIT_RATIO and row is not None and row.assessment.verdict:
            last, at = self.loaders.warned.get(watch.name, ("", -WARN_REPEAT_INTERVALS))
            n = watch.kept.seen
            if row.assessment.verdict != last or n - at >= WARN_REPEAT_INTERVALS:
                self.loaders.warned[watch.name] = (row.assessment.verdict, n)
                self.tell(f"loadtune: warning: {watch.name} waits for data {wait_ratio:.0%} of the time "
                          f"({row.assessment.verdict}): "
                          f"{row.assessment.advice or 'see loadtune report ' + str(self.file)}", logging.WARNING)

    def refresh_group(self) -> None:
        """The job's ranks as they are now; a process group once seen is kept (its store outlives
        a script that destroys the group before it exits)."""
        now = _group()
        if now.store is not None or self.job.group.store is None:
            self.job.group = now

    def tell(self, line: str, level: int = logging.INFO) -> None:
        """Say a line of this run (its status, warnings and end; a tuned run's choices)."""
        if self.say is not None:
            self.say(line, level)
        else:
            logger().log(level, line)

    # --- the rows -----------------------------------------------------------------------------

    def trial_name(self, name: str, rank: int | None = None) -> str:
        """A loader's row name: `name`, or with ranks `name rank R` (this rank's by default)."""
        rank = self.job.group.rank if rank is None else rank
        return f"{name} rank {rank}" if self.job.group.world > 1 else name

    def context(self) -> dict[str, Any]:
        job = self.job
        if job.context is None:
            first = self.loaders.watches[0] if self.loaders.watches else None
            settings = first.facts.settings if first is not None else {}
            length = first.facts.dataset_len if first is not None else None
            context = settings.get("multiprocessing_context")
            job.context = run_context(self.script, _device(), context, self.job.group.world, length, job.started_at)
        return dict(job.context)

    def own_rows(self) -> tuple[list[Record], list[TrialSamples]]:
        """This rank's rows and raw samples, one per loader with a counted interval."""
        rows, samples = [], []
        context = self.context()
        for watch in self.loaders.watches:
            observed: Observed = watch.observed()
            name = self.trial_name(watch.name)
            record = watched_record(observed, {**context, "dataset_len": watch.facts.dataset_len},
                                    dist_rank=self.job.group.rank, ranks=self.job.group.world, trial_name=name,
                                    status=Status.TUNED if watch.name in self.loaders.tuned else Status.WATCHED)
            if record is not None:
                rows.append(record)
                samples.append(watched_samples(name, observed, self.output.parts.setdefault(watch.name, {})))
        return rows, samples

    def write(self, final: bool = False) -> list[Record]:
        """The file as it stands: this rank's rows, and with ranks every rank's (rank 0 writes)."""
        group = self.job.group
        rows, samples = self.own_rows()
        if group.store is not None and group.world > 1:
            try:
                _post(group, self.out, rows, samples if final else (), final)
            except Exception:  # noqa: BLE001 - the store is gone: this rank writes a file of its own
                group.store = None
        if group.store is not None and group.rank != 0:
            return rows
        if group.store is not None:
            others = _gathered(group, self.out, final, 0.0 if self.reason == "interrupted" else FINAL_WAIT_S)
            rows = rows + [r for rank_rows, _ in others for r in rank_rows]
            samples = samples + [s for _, rank_samples in others for s in rank_samples]
        out = self.out if group.world == 1 or group.store is not None else _rank_file(self.out, group.rank)
        self._write_files(self._beside(out), rows, samples)
        self.output.written = rows
        return rows

    @property
    def file(self) -> Path:
        """Where this run's rows go: `out`, or beside it where a file was there before the run."""
        return self.output.files.get(self.out, self.out)

    def _beside(self, out: Path) -> Path:
        """`out`, or where it was there before this run (an earlier run's result): the first free
        NAME-2.csv, NAME-3.csv, ... beside it, said once. A result is never replaced unasked."""
        files = self.output.files
        if out not in files:
            target, n = out, 1
            while target.exists() or samples_file(target).exists():
                n += 1
                target = out.with_name(f"{out.stem}-{n}{out.suffix or '.csv'}")
            if target != out:
                self.tell(f"loadtune: {out} holds an earlier run: this run's rows go to {target}")
            files[out] = target
        return files[out]

    def _write_files(self, out: Path, rows: Sequence[Record], samples: Sequence[TrialSamples]) -> None:
        output = self.output
        if output.results is None or output.samples is None or output.results.path != out:
            out.parent.mkdir(parents=True, exist_ok=True)
            output.results, output.samples = ResultsFile(out), SamplesFile(samples_file(out))
        output.results.replace(rows)
        names = {s.trial for s in samples}
        kept = [s for s in samples if s.trial in names]
        host = rows[0].run.machine.host if rows else ""
        output.samples.write("", host or "", 1.0, self.job.group.world, kept)
        write_loader_info(out, {self.trial_name(w.name): LoaderInfo(w.facts.dataset_spec, w.facts.loader_kwargs,
                                                                     self.script, tuple(sys.argv[1:]))
                                for w in self.loaders.watches})

    def flush(self) -> list[Record]:
        """The file as it stands now (the run goes on)."""
        with self._lock:
            if self.closed:
                return self.output.written
            self.refresh_group()
            return self.write()

    # --- the end ------------------------------------------------------------------------------

    def close(self, reason: str = "") -> list[Record]:
        """The run is over: each loader's last interval, the file, and the closing line."""
        with self._lock:
            if self.closed:
                return self.output.written
            for watch in self.loaders.watches:
                watch.hooks.on_interval = None
                try:
                    watch.close(reason)
                except Exception:  # noqa: BLE001 - its intervals so far still make its row
                    pass
            self.ended = reason
            atexit.unregister(self.close)
            if not self.loaders.watches:
                return []
            self.refresh_group()
            try:
                rows = self.write(final=True)
            except Exception as exc:  # noqa: BLE001 - said, never raised into the script's exit
                self.tell(f"loadtune: could not write {self.file}: {type(exc).__name__}: {exc}", logging.ERROR)
                return []
            if self.job.group.rank == 0:
                self.tell(end_line(rows, self.file, [w.name for w in self.loaders.watches if not w.kept.windows]))
            return rows


def window_figures_of(window: Any) -> tuple[float, float]:
    """One interval's wait ratio and samples/s."""
    from loadtune.record.measurement import Measurement, TrialStart

    return window_figures(Measurement(TrialStart(first_batch_s=0.0), windows=(window,)), AS_MEASURED)[0]


def _seconds(s: float) -> str:
    return f"{s:.0f} s" if s >= 10 else f"{s:.1f} s"


def end_line(rows: Sequence[Record], out: Path, unmeasured: Sequence[str] = ()) -> str:
    """The closing line: the run's wait ratio, and the command that tunes it next."""
    if not rows:
        few = f" ({', '.join(unmeasured)})" if unmeasured else ""
        return (f"loadtune: no loader ran past its warm-up{few}: nothing measured; a run needs a few "
                "batches beyond the first ones, which are dropped")
    parts = []
    for r in rows:
        verdict = f", {r.assessment.verdict}" if r.assessment.verdict else ""
        parts.append(f"{r.trial}: wait ratio {r.wait_ratio:.2f}{verdict}, {r.throughput:,.0f} samples/s")
    return (f"loadtune: watched {'; '.join(parts)}. Rows in {out}. Next: loadtune predict {out}; "
            f"or loadtune init --from {out}, then loadtune sweep")


def _rank_file(out: Path, rank: int) -> Path:
    return out.with_name(f"{out.stem}.rank{rank}{out.suffix or '.csv'}")


def _key(out: Path, rank: int) -> str:
    """A rank's key in the job's store: this job's run (torchrun's run id and restart), this file."""
    run = os.environ.get("TORCHELASTIC_RUN_ID", "")
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return f"{STORE_PREFIX}:{run}:{restart}:{out.resolve().name}:{rank}"


def _post(group: _Group, out: Path, rows: Sequence[Record], samples: Sequence[TrialSamples], final: bool) -> None:
    from loadtune.record.samples import _dumps

    payload = {"rows": [r.to_dict() for r in rows], "samples": [json.loads(_dumps(s)) for s in samples]}
    group.store.set(_key(out, group.rank), json.dumps(payload))
    if final:
        group.store.set(_key(out, group.rank) + ":final", "1")


def _gathered(group: _Group, out: Path, final: bool,
              wait_s: float = FINAL_WAIT_S) -> list[tuple[list[Record], list[TrialSamples]]]:
    """The other ranks' latest rows (and, at the end, raw samples), waiting at the end for their last."""
    from datetime import timedelta

    from loadtune.record.samples import _decoded

    found = []
    deadline = time.monotonic() + wait_s
    for rank in range(1, group.world):
        key = _key(out, rank)
        try:
            if final and wait_s > 0:
                left = max(0.1, deadline - time.monotonic())
                try:
                    group.store.wait([f"{key}:final"], timedelta(seconds=left))
                except Exception:  # noqa: BLE001 - not in time: its latest rows
                    pass
            if not group.store.check([key]):
                continue
            payload = json.loads(group.store.get(key))
        except Exception:  # noqa: BLE001 - a rank that never posted
            continue
        try:
            rows = [Record.of(**r) for r in payload.get("rows", [])]
        except TypeError:  # a rank of another loadtune version
            continue
        samples = []
        for stored in payload.get("samples", []):
            try:
                samples.append(_decoded(stored))
            except Exception:  # noqa: BLE001 - rows without their raw samples
                continue
        found.append((rows, [s for s in samples if isinstance(s, TrialSamples)]))
    return found


def default_name(loader: Any, index: int) -> str:
    """A watched loader's name where none is given: its dataset's class."""
    dataset = getattr(loader, "dataset", None)
    return type(dataset).__name__ if dataset is not None else f"loader {index + 1}"


def _device() -> str:
    try:
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
            return f"cuda:{torch.cuda.current_device()}"
    except Exception:  # noqa: BLE001
        pass
    return "cpu"


_runs: dict[Path, RunWatch] = {}


def script_name() -> str:
    """The name of the script this process runs (a watched run's default name), "python" for none."""
    return Path(sys.argv[0]).stem if sys.argv and sys.argv[0] not in ("", "-c") else "python"


def checked_seconds(seconds: Any, key: str, who: str) -> float:
    """The keyword `key` as a number of seconds above 0, or a ConfigError naming `who`."""
    if isinstance(seconds, bool) or not (isinstance(seconds, (int, float)) and math.isfinite(seconds)
                                         and seconds > 0):
        raise ConfigError(f"{who}: {key} must be a number of seconds above 0, got {seconds!r}")
    return float(seconds)


def run_for(out: str | os.PathLike[str] | None, every_s: float, name: str, script: str | None = None) -> RunWatch:
    """This process's watched run writing to `out` (default: default_out(name)): one file for
    every loader watched into it, whichever way in (loadtune.watch, the script, a callback)."""
    path = Path(out) if out is not None else default_out(name)
    run = _runs.get(path.resolve())
    if run is None or run.closed:
        script = script or (sys.argv[0] if sys.argv and sys.argv[0] else None)
        run = RunWatch(path, every_s, script=script)
        _runs[path.resolve()] = run
    return run
