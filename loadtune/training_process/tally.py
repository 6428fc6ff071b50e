"""The arithmetic of one watched DataLoader, batch by batch, with an injected clock: nothing here
knows about processes, files or torch, so tests drive it with a fake clock and get exact numbers.

The training loop asks for a batch (`asked`), gets it (`got`), trains on it, and asks again: the
time blocked in next() is the batch's wait, the time until the next ask its step. The last batch
of an epoch ends its step when next() says the epoch is over (`ended`); a loop that leaves an
epoch early leaves its last batch uncounted (its step's end was never seen). Creating an epoch's
iterator (where workers start) belongs to the wait of the epoch's first batch. The first batches
are the warm-up, dropped by the sweep's own rule (measure.loop.WarmUp); the counted
batches are cut into intervals of `every_s` seconds, each a Window of the sweep's kind, handed to
`on_interval(interval, tail)`: `tail` marks the run's last interval when it is shorter than
SHORT_TAIL_SHARE of every_s, to be joined to the one before (`joined`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from loadtune.measure.loop import Clock, EdgeProbe, WarmUp, _Columns
from loadtune.record.measurement import CpuWindow, LoaderUse, Window

# A last interval shorter than this share of every_s joins the one before it: each window's
# figures weigh alike in the run's mean, and a sliver of a few batches would weigh as a minute.
SHORT_TAIL_SHARE = 0.5


@dataclass(frozen=True)
class Interval:
    """One closed interval: its Window, and when it started and ended on the tally's clock."""

    window: Window
    start_s: float
    end_s: float


class DeviceIdle(Protocol):
    """A device's idle time for data (see probe.CudaIdle): marks taken when the loop asks for a
    batch and when it has it; `idle_s` gives, per batch, the device's seconds without work
    between the two marks. Without one, the host's wait is the wait."""

    def asked(self) -> Any: ...
    def got(self, mark: Any) -> Any: ...
    def idle_s(self, pairs: list[Any]) -> list[float]: ...


@dataclass(frozen=True)
class Clocks:
    """The clocks a watch reads: wall time, and the training thread's CPU time."""

    wall: Clock = time.perf_counter
    cpu: Clock = time.thread_time


@dataclass
class _Start:
    """The uncounted start: the first batch's wait, its bytes and when it was in the loop's hands,
    then the warm-up's length (from then until counting began)."""

    first_batch_s: float | None = None
    returned_at: float | None = None
    batch_bytes: int | None = None
    warmup_s: float = 0.0


@dataclass
class _Epoch:
    """Where the loop is in its epoch."""

    started: int = 0  # epochs started
    iter_s: float = 0.0  # creating this epoch's iterator: added to its first batch's wait
    new: bool = False  # the next batch handed out is the epoch's first
    handed_out: int = 0  # batches handed out in this epoch so far
    device_mark: Any = None  # the device's mark where this epoch's iterator began


@dataclass
class _Open:
    """The interval being counted: its batches' figures and device marks, where in its epoch and
    when it began, and the edges' readings of it so far."""

    columns: _Columns = field(default_factory=_Columns)
    marks: list[Any] = field(default_factory=list)
    epoch_pos: int = 0
    start_s: float = 0.0
    edge: Any = None  # the edges' reading where the window's current part opened; None: paused
    use: tuple[Any, tuple[Any, ...]] | None = None  # the window's closed parts, added


class Tally:
    """One watched loader's batches: the warm-up, then intervals of counted batches."""

    def __init__(self, *, clocks: Clocks, every_s: float, warmup: WarmUp, probe: EdgeProbe | None = None,
                 on_interval: Callable[[Interval, bool], None] | None = None,
                 device: DeviceIdle | None = None) -> None:
        self.clocks, self.every_s = clocks, every_s
        self.warmup, self.probe, self.on_interval, self.device = warmup, probe, on_interval, device
        self.counting = False
        self.intervals = 0  # closed so far
        self.start = _Start()
        self._epoch = _Epoch()
        self._pending: tuple[float, float, float, int, bool, int, Any] | None = None
        self._open = _Open()

    # --- the loop's events -------------------------------------------------------------------

    def epoch_starting(self) -> float:
        """A new epoch's iterator is about to be made (its workers started): the counted time goes
        on. An epoch left early leaves its last batch uncounted. Returns when, for `epoch_made`."""
        self._pending = None
        self._resume()
        if self.device is not None and self.counting:
            # The device waits from here: the workers' start belongs to the first batch's idle time.
            self._epoch.device_mark = self._device_call(self.device.asked)
        return self.clocks.wall()

    def epoch_made(self, since: float) -> None:
        """The epoch's iterator is made: that time is its first batch's wait."""
        epoch = self._epoch
        epoch.started += 1
        epoch.iter_s, epoch.new, epoch.handed_out = self.clocks.wall() - since, True, 0

    def asked(self) -> tuple[float, float, Any]:
        """The loop asks for a batch: the pending batch's step ends now. Returns the marks that
        `got` takes back."""
        t = self.clocks.wall()
        if self._close_step(t):
            t = self.clocks.wall()  # the interval's bookkeeping (the row, the file) is neither step nor wait
        mark, self._epoch.device_mark = self._epoch.device_mark, None
        if mark is None and self.device is not None and self.counting:
            mark = self._device_call(self.device.asked)
        return t, self.clocks.cpu(), mark

    def got(self, marks: tuple[float, float, Any], samples: int, batch_bytes: int | None = None) -> None:
        """The batch is in the loop's hands."""
        t_asked, cpu_asked, mark = marks
        t = self.clocks.wall()
        epoch, start = self._epoch, self.start
        wait = t - t_asked + epoch.iter_s
        if start.first_batch_s is None:
            start.first_batch_s, start.returned_at, start.batch_bytes = wait, t, batch_bytes
        device = self._device_call(self.device.got, mark) if mark is not None and self.device is not None else None
        self._pending = (t, wait, self.clocks.cpu() - cpu_asked, samples, epoch.new, epoch.handed_out, device)
        epoch.iter_s, epoch.new = 0.0, False
        epoch.handed_out += 1

    def ended(self) -> None:
        """next() said the epoch is over: its last batch's step ended when it was asked. Until the
        next epoch starts the loop does other things (validation, checkpoints): the interval's
        edges (CPU, fetches) leave that time out."""
        self._pending = None
        self._pause()

    def close(self) -> None:
        """The run is over: the interval in progress closed (a short one joins the one before:
        see `on_interval`). The pending batch is left uncounted."""
        self._pending = None
        if self.counting and self._open.columns.wait:
            self._close_window(self.clocks.wall(), final=True)

    # --- counting ----------------------------------------------------------------------------

    def _device_call(self, call: Callable[..., Any], *args: Any) -> Any:
        """A device timing; one that fails (a CUDA error) ends the device's timing: the host's wait
        is the wait from then on."""
        try:
            return call(*args)
        except Exception:  # noqa: BLE001 - never into the training loop
            self.device = None
            return None

    def _close_step(self, t: float) -> bool:
        """The pending batch's step ends at `t`; whether an interval closed (or counting began)."""
        pending, self._pending = self._pending, None
        if pending is None:
            return False
        returned, wait, wait_cpu, samples, new_epoch, pos, device = pending
        if not self.counting:
            settled = self.warmup.after_batch()
            if settled:
                self._start_counting(t)
            return bool(settled)
        columns = self._open.columns
        if not columns.wait:
            self._open.epoch_pos = 0 if new_epoch else pos
        columns.wait.append(wait)
        columns.h2d.append(0.0)
        columns.step.append(t - returned)
        columns.samples.append(samples)
        columns.starts.append(new_epoch)
        columns.wait_cpu.append(wait_cpu)
        if device is not None:
            self._open.marks.append(device)
        if t - self._open.start_s >= self.every_s:
            self._close_window(t)
            return True
        return False

    def _start_counting(self, t: float) -> None:
        self.counting = True
        returned = self.start.returned_at
        self.start.warmup_s = t - (returned if returned is not None else t)
        self._open_window(t)

    def _open_window(self, t: float) -> None:
        self._open = _Open(start_s=t, edge=self.probe.read() if self.probe is not None else None)

    def _pause(self) -> None:
        """The edges' reading of the time since the window (or its last part) opened, kept."""
        window = self._open
        if self.counting and self.probe is not None and window.edge is not None:
            part = self.probe.between(window.edge, self.probe.read())
            window.use = part if window.use is None else added(window.use, part)
            window.edge = None

    def _resume(self) -> None:
        if self.counting and self.probe is not None and self._open.edge is None:
            self._open.edge = self.probe.read()

    def _close_window(self, t: float, final: bool = False) -> None:
        window = self._open
        columns = window.columns
        idles = self._device_call(self.device.idle_s, window.marks) \
            if self.device is not None and window.marks and len(window.marks) == len(columns.wait) else None
        for i, idle in enumerate(idles or ()):
            # The device's idle time for data is the wait; the rest of each batch's time is its step.
            period = columns.wait[i] + columns.step[i]
            columns.wait[i], columns.step[i] = min(idle, period), period - min(idle, period)
        self._pause()
        use = window.use if window.use is not None else (None, ())
        interval = Interval(columns.window(use, window.epoch_pos), window.start_s, t)
        # Short by its batches' own time (at the run's end the clock also holds what came after them).
        own_s = sum(columns.wait) + sum(columns.step)
        tail = final and self.intervals > 0 and own_s < SHORT_TAIL_SHARE * self.every_s
        self.intervals += 1
        if self.on_interval is not None:
            self.on_interval(interval, tail)
        if not final:
            self._open_window(self.clocks.wall())  # after the interval's bookkeeping: in no window


def added(a: tuple[Any, tuple[Any, ...]], b: tuple[Any, tuple[Any, ...]]) -> tuple[Any, tuple[Any, ...]]:
    """Two stretches' CPU and fetches (WindowEdges.between) as one: each summed."""
    cpu_a, uses_a = a
    cpu_b, uses_b = b
    cpu = None
    if cpu_a is not None and cpu_b is not None:
        busy = None if cpu_a.machine_busy_s is None or cpu_b.machine_busy_s is None else \
            cpu_a.machine_busy_s + cpu_b.machine_busy_s
        cpu = CpuWindow(cpu_a.wall_s + cpu_b.wall_s, cpu_a.main_cpu_s + cpu_b.main_cpu_s,
                        cpu_a.workers_cpu_s + cpu_b.workers_cpu_s, busy, cpu_a.machine_cpus)
    loaders: dict[int, LoaderUse] = {}
    for use in (*uses_a, *uses_b):
        before = loaders.get(use.worker)
        loaders[use.worker] = use if before is None else LoaderUse(
            use.worker, before.batches + use.batches, before.fetch_wall_s + use.fetch_wall_s,
            before.fetch_cpu_s + use.fetch_cpu_s)
    return cpu, tuple(loaders.values())


def joined(a: Interval, b: Interval) -> Interval:
    """Two intervals back to back as one."""
    wa, wb = a.window, b.window
    cpu, loaders = added((wa.cpu, wa.loaders), (wb.cpu, wb.loaders))
    window = Window(wa.wait_s + wb.wait_s, wa.h2d_s + wb.h2d_s, wa.step_s + wb.step_s, wa.samples + wb.samples,
                    wa.epoch_start + wb.epoch_start,
                    wa.copy_s + wb.copy_s if wa.copy_s and wb.copy_s else (),
                    wa.wait_cpu_s + wb.wait_cpu_s, cpu, loaders, epoch_pos=wa.epoch_pos)
    return Interval(window, a.start_s, b.end_s)
