"""The results file: before anything is measured, checked writable with room to spare and held
by one sweep at a time (a locked file beside it naming the process that writes it); as the sweep
goes, its CSV (valid after every row), the per-rank CSV beside it with ranks, the raw samples
beside both (record.samples), and what it keeps of an earlier run of the same config and machine
(--resume)."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Iterable, Sequence

from loadtune.asked.config import MeasureSpec, RunSpec
from loadtune.asked.trials import IDEAL, counted_batches
from loadtune.core.errors import LoadtuneError, ResultsError
from loadtune.record.measurement import MIN_BATCHES_BEFORE_BEHIND
from loadtune.record.record import RUN_FIGURES_FORMAT, RankRecord, Record, ResultsFile, rank_file, read_records
from loadtune.record.samples import SamplesFile, TrialSamples, samples_file

# Room the results need at least: a few hundred rows, the per-rank file, the chart.
MIN_FREE_BYTES = 16 * 1024**2


def lock_path(out: Path) -> Path:
    return out.with_name(f".{out.name}.lock")


def check_writable(out: Path, min_free_bytes: int = MIN_FREE_BYTES) -> None:
    """Refuse, in one line, an output that cannot be written or a disk too full for it."""
    if out.is_dir():
        raise LoadtuneError(f"{out}: is a folder; give a CSV file path (--out)")
    folder = out.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LoadtuneError(f"{out}: cannot create its folder {folder}: {exc.strerror or exc}") from None
    probe = folder / f".{out.name}.{os.getpid()}.probe"
    try:
        probe.write_bytes(b"loadtune")
    except OSError as exc:
        raise LoadtuneError(f"{out}: cannot write in {folder}: {exc.strerror or exc}; choose another --out") from None
    finally:
        probe.unlink(missing_ok=True)
    free = shutil.disk_usage(folder).free
    if free < min_free_bytes:
        raise LoadtuneError(f"{out}: only {free / 1024**2:.1f} MB free on its disk; the results need "
                            f"{min_free_bytes / 1024**2:.0f} MB: free some space or choose another --out")


class OutputLock:
    """One writer per results file: an exclusive lock (flock) on a file beside it, which holds
    the writer's pid, host and command for the message a second sweep gets. The kernel drops
    the lock when its process ends, however it ends, so a lock left behind is simply taken."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.path = lock_path(out)
        self.fd: int | None = None

    def acquire(self) -> "OutputLock":
        while True:
            fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                holder = self._holder(fd)
                os.close(fd)
                raise LoadtuneError(f"{self.out}: another sweep is writing this file ({holder}); wait for it to "
                                    "end or use another --out") from None
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:  # not a lock file its last holder removed meanwhile
                break
            os.close(fd)
        me = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time(), "command": " ".join(sys.argv)}
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(me).encode())
        self.fd = fd
        return self

    @staticmethod
    def _holder(fd: int) -> str:
        try:
            holder = json.loads(os.pread(fd, 65536, 0) or b"{}")
        except (OSError, ValueError):
            holder = {}
        where = f" on {holder['host']}" if holder.get("host") not in (None, socket.gethostname()) else ""
        return f"pid {holder.get('pid', '?')}{where}: {holder.get('command') or 'loadtune'}"

    def release(self) -> None:
        if self.fd is not None:
            self.path.unlink(missing_ok=True)  # while still held: no one else can hold this file now
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> "OutputLock":
        return self.acquire()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.release()


@dataclass
class SweepFiles:
    out_path: Path
    spec: RunSpec
    host: str
    kept: list[Record] = field(default_factory=list)  # kept from the CSV alone: figures as recorded
    older: int = 0  # rows that would be kept but for their format: written before the run's figures
    kept_ranks: list[RankRecord] = field(default_factory=list)
    # Kept with their raw samples (and their records, when the CSV has them): measured as if in this sweep.
    stored: list[tuple[TrialSamples, Record | None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.results = ResultsFile(self.out_path)
        self.per_rank = ResultsFile(rank_file(self.out_path), RankRecord) if self.spec.ranks > 1 else None
        self.samples = SamplesFile(samples_file(self.out_path))

    @classmethod
    def open(cls, out_path: Path, spec: RunSpec, host: str, resume: bool) -> "SweepFiles":
        """The files started afresh, holding only what is kept from an earlier run when resuming."""
        files = cls(out_path, spec, host)
        if resume:
            files._keep()
        files.results.start([*files.kept, *(record for _, record in files.stored if record is not None)])
        if files.per_rank is not None:
            files.per_rank.start(files.kept_ranks)
        files.store([stored for stored, _ in files.stored])
        return files

    def _keep(self) -> None:
        """What an earlier run of this config at this scale, on this machine, left: each trial with
        its raw samples where they were kept, else its row as recorded."""
        earlier = read_records(self.out_path)
        rows = {r.trial: r for r in earlier}
        for samples in self._stored_samples():
            row = rows.get(samples.trial)
            if samples.failure is None and self._same_procedure(row, len(samples.measurements)):
                self.stored.append((samples, row))
        names = {samples.trial for samples, _ in self.stored}
        self.kept = [r for r in resumable_records(earlier, self.spec, self.host) if r.trial not in names]
        self.older = len([r for r in resumable_records(earlier, self.spec, self.host, any_format=True)
                          if r.trial not in names]) - len(self.kept)
        kept_names = {r.trial for r in self.kept}
        if self.per_rank is not None and kept_names:
            self.kept_ranks = [r for r in read_records(rank_file(self.out_path), RankRecord)
                               if r.trial in kept_names and r.config_sha == self.spec.sha]

    def _stored_samples(self) -> Iterable[TrialSamples]:
        try:
            stored = self.samples.read()
        except ResultsError:  # unreadable: resumed from the CSV alone
            return []
        if stored is None or (stored.config_sha, stored.host, stored.scale, stored.ranks) != \
                (self.spec.samples_sha, self.host, self.spec.scale, self.spec.ranks):
            return []
        return stored.trials.values()

    def _same_procedure(self, row: Record | None, repeats: int) -> bool:
        """Measured as asked now: as many batches, no more repeats than allowed, by a loadtune that
        measures the run's figures."""
        m = self.spec.config.measure
        return row is not None and row.ran and counted_as_asked(row, m) and 1 <= repeats <= m.repeats \
            and (row.run.format_version or 1) >= RUN_FIGURES_FORMAT

    def append(self, record: Record, rank_records: Sequence[RankRecord] = ()) -> None:
        """A trial's first record (and its ranks'), appended and flushed."""
        self.results.append(record)
        if self.per_rank is not None:
            for row in rank_records:
                self.per_rank.append(row)

    def replace(self, records: Sequence[Record], rank_records: Sequence[RankRecord] = ()) -> None:
        """Both files rewritten whole (atomically) after a record changed."""
        self.results.replace(records)
        if self.per_rank is not None:
            self.per_rank.replace(rank_records)

    def store(self, samples: Sequence[TrialSamples]) -> None:
        """The raw samples file rewritten (only new measurements are compressed again)."""
        # Matched by the config without measure.repeats: a resumed sweep may ask for more.
        self.samples.write(self.spec.samples_sha, self.host, self.spec.scale, self.spec.ranks, samples)


def resumable_records(records: Iterable[Record], spec: RunSpec, host: str, any_format: bool = False) -> list[Record]:
    """The records of an earlier sweep that this one can keep: same config sha, scale,
    ranks and host, measured as asked now (status ok, at least min_repeats (the ideal reference:
    one) and at most repeats repeats, as many batches), their figures the run's (files written
    before RUN_FIGURES_FORMAT weighed epoch starts by the windows' epochs: measured again, unless
    `any_format`)."""
    m = spec.config.measure
    return [r for r in records
            if r.run.config_sha == spec.sha and r.run.machine.host == host and r.run.scale == spec.scale
            and (r.measuring.ranks or 1) == spec.ranks
            and r.ran and r.measuring.repeats is not None and (m.min_repeats <= r.measuring.repeats or r.trial == IDEAL)
            and r.measuring.repeats <= m.repeats
            and counted_as_asked(r, m) and (any_format or (r.run.format_version or 1) >= RUN_FIGURES_FORMAT)]


def counted_as_asked(record: Record, measure: MeasureSpec) -> bool:
    """The row's windows counted the batches `measure` asks (measure.batches; the ideal's,
    measure.ideal_batches), or fewer where racing ended its window early (stopped_early, with at
    least the batches a window runs before it may end: measurement.Behind)."""
    batches = counted_batches(record.trial, measure)
    counted = record.measuring.batches
    return counted == batches or (bool(record.measuring.stopped_early) and counted is not None
                                  and MIN_BATCHES_BEFORE_BEHIND <= counted < batches)
