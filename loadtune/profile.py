"""`loadtune profile`: run the baseline loop under torch.profiler and say where the time goes.

The loop is the very loop a sweep measures (docs/methodology.md, "The loop"): wait (blocked in
next()), h2d (the copy to the device, on an accelerator only) and step, each inside a
torch.profiler.record_function region named `loadtune.wait`, `loadtune.h2d` (where there is a
copy) and `loadtune.step`, so they stand out in the operator table
and in a Chrome / Perfetto trace. Only the main process is profiled: DataLoader workers run
in processes of their own, so their work shows as `loadtune.wait` here.

Returns plain data; printing is the CLI's job.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadtune.asked.config import Config, RunSpec
from loadtune.asked.trials import Trial
from loadtune.core.errors import LoadtuneError
from loadtune.measure.loop import PARTS
from loadtune.record.measurement import Measurement

TABLE_ROWS = 25
# Kineto (the profiler's C++ side) logs its stages and, without a GPU, a harmless
# "gpuGetDeviceCount failed" ERROR line to stderr; 5 keeps only its fatal messages.
KINETO_LOG_VAR, KINETO_QUIET = "KINETO_LOG_LEVEL", "5"


@dataclass(frozen=True)
class ProfileResult:
    """What one profiled run of the baseline observed."""

    device: str
    dataloader: str          # the profiled settings, as a DataLoader(...) line
    warmup_batches: int      # run before the profiler started, not counted
    batches: int             # profiled batches
    samples: int             # samples in the profiled batches
    epochs_started: int      # new iterators made during the profiled batches
    wait_s: float            # Σ time blocked in next(), new epochs' iterator creation included
    h2d_s: float             # Σ time copying batches to the device (0 work on CPU)
    step_s: float            # Σ time in the step (synchronised on CUDA)
    table: str               # prof.key_averages().table(sort_by="cpu_time_total", row_limit=25)
    trace_path: Path | None  # the Chrome trace written, when one was asked for

    @property
    def total_s(self) -> float:
        return self.wait_s + self.h2d_s + self.step_s

    def _share(self, part: float) -> float:
        return part / self.total_s if self.total_s > 0 else 0.0

    @property
    def wait_share(self) -> float:
        return self._share(self.wait_s)

    @property
    def h2d_share(self) -> float:
        return self._share(self.h2d_s)

    @property
    def step_share(self) -> float:
        return self._share(self.step_s)

    @property
    def wait_ratio(self) -> float:
        """(wait + h2d) / total, as the sweep defines it (docs/methodology.md, "The wait ratio")."""
        return self._share(self.wait_s + self.h2d_s)

    @property
    def throughput(self) -> float:
        """Samples per second over the profiled batches (the profiler's overhead included)."""
        return self.samples / self.total_s if self.total_s > 0 else 0.0

    @property
    def groups(self) -> dict[str, tuple[float, float]]:
        """{"wait": (seconds, share), "h2d": ..., "step": ...} in loop order."""
        return {name: (getattr(self, f"{name}_s"), self._share(getattr(self, f"{name}_s")))
                for name in PARTS}

    def summary_lines(self) -> list[str]:
        """A few plain lines for the terminal: where the loop's time went."""
        lines = [f"Profiled {self.batches} batches ({self.samples} samples) of the baseline on "
                 f"{self.device} after {self.warmup_batches} warm-up batches: {self.dataloader}"]
        for name, (seconds, share) in self.groups.items():
            per_batch_ms = 1000 * seconds / self.batches if self.batches else 0.0
            lines.append(f"  {name:<5} {seconds:8.3f} s  {share:6.1%}  ({per_batch_ms:.2f} ms per batch)")
        lines.append(f"  total {self.total_s:8.3f} s  wait ratio {self.wait_ratio:.3f}, "
                     f"{self.throughput:.1f} samples/s (profiler overhead included)")
        if self.epochs_started:
            lines.append(f"  {self.epochs_started} new epoch(s) started inside the profiled batches "
                         "(their start-up counts as wait)")
        if self.trace_path is not None:
            lines.append(f"Trace: {self.trace_path} (open in https://ui.perfetto.dev or chrome://tracing)")
        return lines


@contextmanager
def _quiet_kineto() -> Any:
    """Quieten kineto's stderr logging for the profiled run, unless the user set its level."""
    if KINETO_LOG_VAR in os.environ:
        yield
        return
    os.environ[KINETO_LOG_VAR] = KINETO_QUIET
    try:
        yield
    finally:
        os.environ.pop(KINETO_LOG_VAR, None)


class _ProfiledWindow:
    """The measured loop's sampling hooks, used to run the profiler over the counted batches
    only: it starts once the warm-up is done and stops after the last counted batch."""

    def __init__(self, profiler: Any) -> None:
        self.profiler, self.running = profiler, False

    def start(self) -> None:
        pass

    def ready(self, settled: bool) -> bool:
        if not settled:
            return False
        if not self.running:
            self.profiler.__enter__()
            self.running = True
        return True

    def end(self) -> None:
        if self.running:
            self.running = False
            self.profiler.__exit__(None, None, None)


def profile_run(
    spec: RunSpec,
    batches: int,
    trace_path: Path | str | None,
    device: str,
    warmup_batches: int | None = None,
) -> ProfileResult:
    """Profile `batches` batches of the baseline loader of `spec` feeding its step on `device`.

    `device` may be "auto" (resolved here). The warm-up (default: a sweep's, workers' share
    included; at least 1 batch) runs before the profiler starts; a new iterator is made when
    the loader is exhausted, or every measure.epoch_batches batches, as in a sweep. Raises
    LoadtuneError for anything the user can fix, with the cause chained.
    """
    import torch

    from loadtune.measure.loop import measure_loop
    from loadtune.parts.device import make_synced_step, make_transfer, resolve_device
    from loadtune.parts.failures import describe
    from loadtune.parts.steps import build_step

    if isinstance(batches, bool) or not isinstance(batches, int) or batches < 1:
        raise LoadtuneError(f"--batches {batches!r}: must be a whole number of at least 1")
    device = resolve_device(device)
    trace = Path(trace_path) if trace_path is not None else None
    config, trial, loader, kwargs = _baseline_loader(spec)
    warmup, extra = _warmup(config, kwargs, loader, batches, warmup_batches)
    step = make_synced_step(build_step(config.step, str(spec.base_dir), device), device)
    transfer = make_transfer(device, bool(kwargs.get("pin_memory")))
    prof = _profiler(device)
    window = _ProfiledWindow(prof)
    # The same measured loop as a sweep's, with each part in a region of the profiler.
    try:
        with _quiet_kineto():
            measurement = measure_loop(loader, step, warmup_batches=warmup, batches=batches, repeats=1,
                                       epoch_batches=config.measure.epoch_batches, transfer=transfer,
                                       default_batch_size=kwargs.get("batch_size") or 1, sampling=window,
                                       region=torch.profiler.record_function, fingerprint=False,
                                       extra_warmup_batches=extra,
                                       extra_warmup_max_s=config.measure.warmup_per_worker_max_s)
    except LoadtuneError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's dataset, collate or step failed
        raise LoadtuneError(f"{spec.path}: the baseline failed while profiling: {describe(exc)}") from exc
    finally:
        window.end()
        del loader  # shut workers down now, not at interpreter exit
    table = prof.key_averages().table(sort_by="cpu_time_total", row_limit=TABLE_ROWS)
    _write_trace(prof, trace)
    return _result(device, trial, measurement, batches, table, trace)


def _baseline_loader(spec: RunSpec) -> tuple[Config, Trial, Any, dict[str, Any]]:
    """The config (its loader block completed), baseline trial, DataLoader and its kwargs, built
    as a sweep builds its baseline: a factory's DataLoader (or data module's) gives the settings
    the loader block completes, and its sampler, collate_fn and the rest."""
    from torch.utils.data import DataLoader

    from loadtune.asked.config import adopt_loader
    from loadtune.asked.plan import baseline_trial
    from loadtune.parts.factory import build_source
    from loadtune.parts.failures import describe
    from loadtune.parts.loader import loader_kwargs

    config, base_dir = spec.config, str(spec.base_dir)
    source = build_source(config.dataset.factory, config.dataset.kwargs, base_dir)
    config = config.model_copy(update={"loader": adopt_loader(config.loader, source.settings, f"{spec.path}: loader")})
    trial = baseline_trial(config)
    try:
        kwargs = loader_kwargs(trial, base_dir, parts=source.parts)
        loader = DataLoader(source.dataset, **kwargs)
    except LoadtuneError:
        raise
    except Exception as exc:  # noqa: BLE001 - DataLoader refusing the user's settings
        raise LoadtuneError(f"{spec.path}: loader: DataLoader refused the baseline: {describe(exc)}") from exc
    return config, trial, loader, kwargs


def _warmup(config: Config, kwargs: dict[str, Any], loader: Any, batches: int,
            warmup_batches: int | None) -> tuple[int, int]:
    """The warm-up batches (at least 1) and the extra ones for the workers: a sweep's, unless
    `warmup_batches` is given (then no extra)."""
    from loadtune.parts.loader import epoch_length

    warmup = config.measure.warmup_batches if warmup_batches is None else warmup_batches
    extra = 0 if warmup_batches is not None else config.measure.extra_warmup_for(
        kwargs.get("num_workers") or 0, bool(kwargs.get("persistent_workers")),
        epoch_length(loader, config.measure.epoch_batches), batches)
    return max(int(warmup), 1), extra


def _profiler(device: str) -> Any:
    """A torch profiler of the CPU, and of CUDA on a CUDA device."""
    import torch

    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.startswith("cuda"):
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    return torch.profiler.profile(activities=activities)


def _write_trace(prof: Any, trace: Path | None) -> None:
    """Export the Chrome trace to `trace`, when one was asked for."""
    if trace is None:
        return
    try:
        trace.parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(trace))
    except OSError as exc:
        raise LoadtuneError(f"{trace}: cannot write the trace: {exc.strerror or exc}") from None


def _result(device: str, trial: Trial, measurement: Measurement, batches: int, table: str,
            trace: Path | None) -> ProfileResult:
    """The ProfileResult of the profiled (only) window."""
    from loadtune.record.settings import dataloader_line

    counted = measurement.windows[0]
    return ProfileResult(
        device=device,
        dataloader=dataloader_line(trial.loader_kwargs),
        warmup_batches=measurement.start.warmup_batches,
        batches=batches,
        samples=sum(counted.samples),
        epochs_started=sum(counted.epoch_start),
        wait_s=sum(counted.wait_s),
        h2d_s=sum(counted.h2d_s),
        step_s=sum(counted.step_s),
        table=table,
        trace_path=trace,
    )
