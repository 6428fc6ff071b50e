"""What a sweep writes as it goes: its CSV (valid after every row), the per-rank CSV beside it
with ranks, and what it keeps from an earlier run of the same config and machine (--resume)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from loadtune.config import RunSpec
from loadtune.results.record import RankRecord, Record, ResultsFile, rank_file, read_records


@dataclass
class SweepFiles:
    out_path: Path
    ranks: bool  # a per-rank CSV beside the CSV
    kept: list[Record] = field(default_factory=list)
    kept_ranks: list[RankRecord] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.results = ResultsFile(self.out_path)
        self.per_rank = ResultsFile(rank_file(self.out_path), RankRecord) if self.ranks else None

    @classmethod
    def open(cls, out_path: Path, spec: RunSpec, host: str, resume: bool) -> "SweepFiles":
        """The files started afresh, holding only what is kept from an earlier run when resuming."""
        files = cls(out_path, spec.ranks > 1)
        if resume:
            files.kept = resumable_records(out_path, spec, host)
            names = {r.trial for r in files.kept}
            if files.per_rank is not None and names:
                files.kept_ranks = [r for r in read_records(rank_file(out_path), RankRecord)
                                    if r.trial in names and r.config_sha == spec.sha]
        files.results.start(files.kept)
        if files.per_rank is not None:
            files.per_rank.start(files.kept_ranks)
        return files

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


def resumable_records(path: Path, spec: RunSpec, host: str) -> list[Record]:
    """Records of an earlier sweep at `path` that this one can keep: same config sha, scale,
    ranks and host, measured as asked now (status ok, at least min_repeats and at most repeats
    repeats, as many batches)."""
    m = spec.config.measure
    return [r for r in read_records(path)
            if r.config_sha == spec.sha and r.host == host and r.scale == spec.scale and (r.ranks or 1) == spec.ranks
            and r.ran and r.repeats is not None and m.min_repeats <= r.repeats <= m.repeats
            and r.batches == m.batches]
