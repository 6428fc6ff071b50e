"""The arithmetic of one watched DataLoader, batch by batch, with an injected clock: nothing here
knows about processes, files or torch, so tests drive it with a fake clock and get exact numbers.

The training loop asks for a batch (`asked`), gets it (`got`), trains on it, and asks again: the
time blocked in next() is the batch's wait, the time until the next ask its step. The last batch
of an epoch ends its step when next() says the epoch is over (`ended`); a loop that leaves an
epoch early leaves its last batch uncounted (its step's end was never seen). Creating an epoch's
iterator (where workers start) belongs to the wait of the epoch's first batch. The first batches
are the warm-up, dropped by the sweep's own rule (trial_process.measure.WarmUp); the counted
batches are cut into intervals of `every_s` seconds, each a Window of the sweep's kind, handed to
`on_interval(interval, tail)`: `tail` marks the run's last interval when it is shorter than
SHORT_TAIL_SHARE of every_s, to be joined to the one before (`joined`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol

from loadtune.measurement import CpuWindow, LoaderUse, Window
from loadtune.trial_process.measure import Clock, EdgeProbe, WarmUp, _Columns

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


class Tally:
    """One watched loader's batches: the warm-up, then intervals of counted batches."""

    def __init__(self, *, clock: Clock, cpu_clock: Clock, every_s: float, warmup: WarmUp,
                 probe: EdgeProbe | None = None, on_interval: Callable[[Interval, bool], None] | None = None,
                 device: DeviceIdle | None = None) -> None:
        self.clock, self.cpu_clock, self.every_s = clock, cpu_clock, every_s
        self.warmup, self.probe, self.on_interval, self.device = warmup, probe, on_interval, device
        self.first_batch_s: float | None = None
        self.warmup_s = 0.0
        self.batch_bytes: int | None = None
        self.counting = False
        self.epochs = 0  # epochs started
        self.asked_at: float | None = None
        self._iter_s = 0.0  # creating this epoch's iterator: added to its first batch's wait
        self._new_epoch = False
        self._in_epoch = 0  # batches handed out in this epoch so far
        self._pending: tuple[float, float, float, int, bool, int, Any] | None = None
        self._columns = _Columns()
        self._marks: list[Any] = []
        self._window_pos = 0
        self._window_start = 0.0
        self._edge: Any = None  # the edges' reading where the window's current part opened; None: paused
        self._use: tuple[Any, tuple[Any, ...]] | None = None  # the window's closed parts, added
        self._first_returned: float | None = None
        self.intervals = 0  # closed so far
        self._epoch_mark: Any = None  # the device's mark where this epoch's iterator began

    # --- the loop's events -------------------------------------------------------------------

    def epoch_starting(self) -> float:
        """A new epoch's iterator is about to be made (its workers started): the counted time goes
        on. An epoch left early leaves its last batch uncounted. Returns when, for `epoch_made`."""
        self._pending = None
        self._resume()
        if self.device is not None and self.counting:
            # The device waits from here: the workers' start belongs to the first batch's idle time.
            self._epoch_mark = self._device_call(self.device.asked)
        return self.clock()

    def epoch_made(self, since: float) -> None:
        """The epoch's iterator is made: that time is its first batch's wait."""
        self.epochs += 1
        self._iter_s, self._new_epoch, self._in_epoch = self.clock() - since, True, 0

    def asked(self) -> tuple[float, float, Any]:
        """The loop asks for a batch: the pending batch's step ends now. Returns the marks that
        `got` takes back."""
        t = self.clock()
        if self._close_step(t):
            t = self.clock()  # the interval's bookkeeping (the row, the file) is neither step nor wait
        mark, self._epoch_mark = self._epoch_mark, None
        if mark is None and self.device is not None and self.counting:
            mark = self._device_call(self.device.asked)
        return t, self.cpu_clock(), mark

    def got(self, marks: tuple[float, float, Any], samples: int, batch_bytes: int | None = None) -> None:
        """The batch is in the loop's hands."""
        t_asked, cpu_asked, mark = marks
        t = self.clock()
        wait = t - t_asked + self._iter_s
        if self.first_batch_s is None:
            self.first_batch_s, self._first_returned, self.batch_bytes = wait, t, batch_bytes
        device = self._device_call(self.device.got, mark) if mark is not None and self.device is not None else None
        self._pending = (t, wait, self.cpu_clock() - cpu_asked, samples, self._new_epoch, self._in_epoch, device)
        self._iter_s, self._new_epoch = 0.0, False
        self._in_epoch += 1

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
        if self.counting and self._columns.wait:
            self._close_window(self.clock(), final=True)

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
        columns = self._columns
        if not columns.wait:
            self._window_pos = 0 if new_epoch else pos
        columns.wait.append(wait)
        columns.h2d.append(0.0)
        columns.step.append(t - returned)
        columns.samples.append(samples)
        columns.starts.append(new_epoch)
        columns.wait_cpu.append(wait_cpu)
        if device is not None:
            self._marks.append(device)
        if t - self._window_start >= self.every_s:
            self._close_window(t)
            return True
        return False

    def _start_counting(self, t: float) -> None:
        self.counting = True
        self.warmup_s = t - (self._first_returned if self._first_returned is not None else t)
        self._open_window(t)

    def _open_window(self, t: float) -> None:
        self._columns, self._marks = _Columns(), []
        self._window_start = t
        self._use = None
        self._edge = self.probe.read() if self.probe is not None else None

    def _pause(self) -> None:
        """The edges' reading of the time since the window (or its last part) opened, kept."""
        if self.counting and self.probe is not None and self._edge is not None:
            part = self.probe.between(self._edge, self.probe.read())
            self._use = part if self._use is None else added(self._use, part)
            self._edge = None

    def _resume(self) -> None:
        if self.counting and self.probe is not None and self._edge is None:
            self._edge = self.probe.read()

    def _close_window(self, t: float, final: bool = False) -> None:
        columns = self._columns
        idles = self._device_call(self.device.idle_s, self._marks) \
            if self.device is not None and self._marks and len(self._marks) == len(columns.wait) else None
        for i, idle in enumerate(idles or ()):
            # The device's idle time for data is the wait; the rest of each batch's time is its step.
            period = columns.wait[i] + columns.step[i]
            columns.wait[i], columns.step[i] = min(idle, period), period - min(idle, period)
        self._pause()
        use = self._use if self._use is not None else (None, ())
        interval = Interval(columns.window(use, self._window_pos), self._window_start, t)
        # Short by its batches' own time (at the run's end the clock also holds what came after them).
        own_s = sum(columns.wait) + sum(columns.step)
        tail = final and self.intervals > 0 and own_s < SHORT_TAIL_SHARE * self.every_s
        self.intervals += 1
        if self.on_interval is not None:
            self.on_interval(interval, tail)
        if not final:
            self._open_window(self.clock())  # after the interval's bookkeeping: in no window


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
