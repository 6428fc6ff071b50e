"""What was asked: a trial is one DataLoader configuration to measure, frozen, never what was
observed (see loadtune.record.measurement for that). Shared by the sweep process, which plans trials,
the trial process, which builds them, and the offline readers, which name them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from loadtune.asked.config import LoaderSpec, MeasureSpec

BASELINE = "baseline"
COMBINED = "combined"
IDEAL = "ideal"
FEED_LOADER = "dataloader"
FEED_MEMORY = "memory"  # the ideal: one batch kept on the device, no data cost at all
# DataLoader's own defaults (LoaderSpec holds them): a keyword left at its default need not be written.
LOADER_DEFAULTS: dict[str, Any] = LoaderSpec().model_dump()
# What DataLoader uses for prefetch_factor when workers run and it is left unset.
DEFAULT_PREFETCH = 2


def counted_batches(trial: str | None, measure: MeasureSpec) -> int:
    """The batches a trial's window counts: the ideal's short window (measure.ideal_batches),
    every other trial's measure.batches."""
    return measure.ideal_batches if trial == IDEAL else measure.batches


def format_value(value: Any) -> str:
    """A value as YAML would write it, so a trial name can be pasted into --set."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def effective_settings(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The swept settings as DataLoader applies them (prefetch_factor 2 when workers use the default)."""
    workers = kwargs.get("num_workers", 0)
    prefetch = kwargs.get("prefetch_factor")
    if workers > 0 and prefetch is None:
        prefetch = DEFAULT_PREFETCH
    return {
        "num_workers": workers,
        "prefetch_factor": prefetch if workers > 0 else None,
        "persistent_workers": kwargs.get("persistent_workers", False),
        "pin_memory": kwargs.get("pin_memory", False),
        "batch_size": kwargs.get("batch_size"),
        "main_threads": kwargs.get("main_threads"),
        "worker_threads": kwargs.get("worker_threads") if workers > 0 else None,
    }


def cost_of(settings: Mapping[str, Any]) -> tuple[int, int, bool, bool, bool, bool, bool]:
    """What a config costs to run, to choose the cheaper of two that perform alike: workers
    first, then prefetch depth, kept workers, pinning (DataLoader's defaults filled in); then
    what departs from the defaults without a cost in resources (batches out of order, thread
    settings), so that of two alike the one nearer the user's code is kept."""
    applied = effective_settings(settings)
    return (applied["num_workers"] or 0, applied["prefetch_factor"] or 0, bool(applied["persistent_workers"]),
            bool(applied["pin_memory"]), settings.get("in_order", True) is False,
            settings.get("worker_threads") is not None, settings.get("main_threads") is not None)


@dataclass(frozen=True)
class Trial:
    """One DataLoader configuration to measure: what was asked, never what was observed."""

    name: str
    changed: str
    value: Any
    settings: tuple[tuple[str, Any], ...]
    skip_reason: str | None = None
    feed: str = FEED_LOADER
    asked_by: str | None = None  # the trial whose verdict's advice asked for this one

    @property
    def loader_kwargs(self) -> dict[str, Any]:
        return dict(self.settings)

    @property
    def skipped(self) -> bool:
        return self.skip_reason is not None

    @property
    def value_text(self) -> str | None:
        """The CSV's `value`: the new value of a single change; every change for combinations."""
        if self.changed in (BASELINE, IDEAL):
            return None
        if self.changed == COMBINED or "+" in self.changed:
            return str(self.value)
        return format_value(self.value)
