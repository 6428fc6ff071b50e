"""The training step that consumes each batch: stand-ins or the user's own."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from loadtune.asked.config import StepSpec
from loadtune.core.errors import FactoryError
from loadtune.parts.factory import accepts_keyword, invoke, load_callable


def sleep_step(seconds: float) -> Callable[[Any], None]:
    """Accelerator stand-in: the host waits and uses no CPU, as it would for a GPU kernel."""

    def step(batch: Any) -> None:
        time.sleep(seconds)

    return step


def busy_step(seconds: float, cpu_clock: Callable[[], float] = time.thread_time) -> Callable[[Any], None]:
    """CPU-using stand-in: burns `seconds` of this thread's CPU time (fixed work, not wall time),
    so a step that competes with workers for cores takes longer, as a host-side step would."""

    def step(batch: Any) -> None:
        end = cpu_clock() + seconds
        while cpu_clock() < end:
            pass

    return step


def build_step(spec: StepSpec, base_dir: Path | str, device: Any) -> Callable[[Any], None]:
    if spec.sleep_s is not None:
        return sleep_step(spec.sleep_s)
    if spec.busy_s is not None:
        return busy_step(spec.busy_s)
    assert spec.factory is not None  # StepSpec holds exactly one of sleep_s, busy_s, factory
    kwargs = dict(spec.kwargs)
    factory = load_callable(spec.factory, base_dir, "step factory")
    if accepts_keyword(factory, "device") and "device" not in kwargs:
        kwargs["device"] = device
    step = invoke(factory, kwargs, spec.factory, "step factory")
    if not callable(step):
        raise FactoryError(f"step factory {spec.factory!r} returned {type(step).__name__}, "
                           "not a callable(batch)")
    user_step: Callable[[Any], None] = step
    return user_step
