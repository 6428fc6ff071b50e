"""What the sweep process sends a trial process: a job, picklable, and what preflight returns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loadtune.asked.config import DatasetSpec, LoaderSpec, MeasureSpec, StepSpec
from loadtune.asked.trials import Trial
from loadtune.record.measurement import Behind


@dataclass(frozen=True)
class TrialJob:
    """Everything a trial process needs, picklable: the trial and how to build its parts."""

    trial: Trial
    dataset: DatasetSpec
    step: StepSpec
    measure: MeasureSpec
    device: str
    base_dir: str
    parent_pid: int
    start_method: str  # how DataLoader starts workers in the user's own process
    ranks: int = 1  # data-parallel ranks run at once (see loadtune.trial_process.ranks)
    group: Any = None  # ranks.GroupSpec: this process is one rank of a sweep run under torchrun
    scratch: str | None = None  # a folder for files the trial leaves, removed by the sweep
    behind: Behind | None = None  # when its window ends early, clearly behind the leader (racing)

    @property
    def name(self) -> str:
        return f"trial {self.trial.name}"


@dataclass(frozen=True)
class PreflightInfo:
    """What the sweep learns by building the user's parts once: or the error that stops it."""

    dataset_len: int | None = None
    batch_bytes: int | None = None
    error: str | None = None
    error_kind: str | None = None  # "config" or "factory"
    source_kind: str = "dataset"  # what the factory returned (factory.Source.kind)
    source_settings: dict[str, Any] | None = None  # its DataLoader's plain settings: the baseline
    iterable: bool | None = None  # the dataset is an IterableDataset
    # Whether the first batch, read twice, had the same bytes (sample keys): False where samples
    # change from one read to the next (random augmentation); None where it could not be told.
    stable_bytes: bool | None = None
    # What only torch can tell, asked here so that the sweep process never imports it (seconds
    # at its start and end): the device `auto` resolved to, CUDA devices, torch's version, the GPU.
    device: str = "cpu"
    cuda_count: int = 0
    torch_version: str = ""
    gpu: str = ""


@dataclass(frozen=True)
class PreflightJob:
    """Build every user part once, in a process of its own, before any trial: a factory that
    raises, hangs or crashes stops the sweep with a clear error instead of failing every row."""

    dataset: DatasetSpec
    baseline: Trial
    step: StepSpec
    device: str  # as asked (auto, cpu, cuda, cuda:I): resolved in the preflight
    base_dir: str
    config_path: str
    parent_pid: int
    start_method: str
    ranks: int = 1
    loader: LoaderSpec | None = None  # the config's loader block, which a factory's DataLoader completes

    @property
    def name(self) -> str:
        return "preflight"
