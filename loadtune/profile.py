"""`loadtune profile`: run the baseline loop under torch.profiler and say where the time goes.

The loop is the one a sweep measures (SPEC §3): wait (blocked in next()), h2d (the copy to
the device) and step, each inside a torch.profiler.record_function region named
`loadtune.wait`, `loadtune.h2d` and `loadtune.step`, so they stand out in the operator table
and in a Chrome / Perfetto trace. Only the main process is profiled: DataLoader workers run
in processes of their own, so their work shows as `loadtune.wait` here.

Returns plain data; printing is the CLI's job.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadtune.config import RunSpec
from loadtune.errors import LoadtuneError

REGIONS = ("wait", "h2d", "step")
REGION_PREFIX = "loadtune."
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
        """(wait + h2d) / total, as the sweep defines it (SPEC §3)."""
        return self._share(self.wait_s + self.h2d_s)

    @property
    def throughput(self) -> float:
        """Samples per second over the profiled batches (the profiler's overhead included)."""
        return self.samples / self.total_s if self.total_s > 0 else 0.0

    @property
    def groups(self) -> dict[str, tuple[float, float]]:
        """{"wait": (seconds, share), "h2d": ..., "step": ...} in loop order."""
        return {name: (getattr(self, f"{name}_s"), self._share(getattr(self, f"{name}_s")))
                for name in REGIONS}

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


def _describe(exc: BaseException) -> str:
    from loadtune.trial import describe

    return describe(exc)


def profile_run(
    spec: RunSpec,
    batches: int,
    trace_path: Path | str | None,
    device: str,
    warmup_batches: int | None = None,
) -> ProfileResult:
    """Profile `batches` batches of the baseline loader of `spec` feeding its step on `device`.

    `device` may be "auto" (resolved here). Warm-up batches (default: the config's
    measure.warmup_batches, at least 1) run before the profiler starts. A new iterator is made
    when the loader is exhausted, or every measure.epoch_batches batches as in a sweep.
    Raises LoadtuneError for anything the user can fix (factories, settings, a dataset that
    fails while loading), with the cause chained.
    """
    import torch
    from torch.utils.data import DataLoader

    from loadtune.device import make_synced_step, make_transfer, resolve_device
    from loadtune.factory import build_dataset
    from loadtune.measure import _Feed, batch_len
    from loadtune.plan import baseline_trial
    from loadtune.report import dataloader_line
    from loadtune.steps import build_step
    from loadtune.trial import loader_kwargs

    if isinstance(batches, bool) or not isinstance(batches, int) or batches < 1:
        raise LoadtuneError(f"--batches {batches!r}: must be a whole number of at least 1")
    config = spec.config
    warmup = config.measure.warmup_batches if warmup_batches is None else warmup_batches
    warmup = max(int(warmup), 1)
    device = resolve_device(device)
    base_dir = str(spec.base_dir)
    trace = Path(trace_path) if trace_path is not None else None

    dataset = build_dataset(config.dataset.factory, config.dataset.kwargs, base_dir)
    trial = baseline_trial(config)
    try:
        kwargs = loader_kwargs(trial, base_dir)
        loader = DataLoader(dataset, **kwargs)
    except LoadtuneError:
        raise
    except Exception as exc:  # noqa: BLE001 - DataLoader refusing the user's settings
        raise LoadtuneError(f"{spec.path}: loader: DataLoader refused the baseline: {_describe(exc)}") from exc
    step = make_synced_step(build_step(config.step, base_dir, device), device)
    transfer = make_transfer(device, bool(kwargs.get("pin_memory")))
    default_size = kwargs.get("batch_size") or 1

    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.startswith("cuda"):
        activities.append(torch.profiler.ProfilerActivity.CUDA)

    totals = dict.fromkeys(REGIONS, 0.0)
    samples = epochs = 0
    feed = _Feed(loader, config.measure.epoch_batches)
    clock = time.perf_counter
    try:
        for _ in range(warmup):
            batch, _ = feed.next()
            step(transfer(batch) if transfer is not None else batch)
        with _quiet_kineto(), torch.profiler.profile(activities=activities) as prof:
            for _ in range(batches):
                t0 = clock()
                with torch.profiler.record_function("loadtune.wait"):
                    batch, new_epoch = feed.next()
                t1 = clock()
                with torch.profiler.record_function("loadtune.h2d"):
                    moved = transfer(batch) if transfer is not None else batch
                t2 = clock()
                with torch.profiler.record_function("loadtune.step"):
                    step(moved)
                t3 = clock()
                totals["wait"] += t1 - t0
                totals["h2d"] += t2 - t1
                totals["step"] += t3 - t2
                samples += batch_len(batch, default_size)
                epochs += bool(new_epoch)
    except LoadtuneError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's dataset, collate or step failed
        raise LoadtuneError(f"{spec.path}: the baseline failed while profiling: {_describe(exc)}") from exc
    finally:
        feed.close()
        del feed, loader  # shut workers down now, not at interpreter exit

    table = prof.key_averages().table(sort_by="cpu_time_total", row_limit=TABLE_ROWS)
    if trace is not None:
        try:
            trace.parent.mkdir(parents=True, exist_ok=True)
            prof.export_chrome_trace(str(trace))
        except OSError as exc:
            raise LoadtuneError(f"{trace}: cannot write the trace: {exc.strerror or exc}") from None
    return ProfileResult(
        device=device,
        dataloader=dataloader_line(trial),
        warmup_batches=warmup,
        batches=batches,
        samples=samples,
        epochs_started=epochs,
        wait_s=totals["wait"],
        h2d_s=totals["h2d"],
        step_s=totals["step"],
        table=table,
        trace_path=trace,
    )
