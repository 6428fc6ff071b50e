"""The trial process's line to the sweep process, which samples this process tree from outside
while the counted windows run (see loadtune.sweep_process.launch)."""

from __future__ import annotations

import time
from typing import Any

# Told to the sweep process, which samples this process tree meanwhile.
COUNTED_START = "counted-start"  # at the warm-up: start sampling
SAMPLING = "sampling"  # the answer: the first reading is taken, the counted windows may start
COUNTED_END = "counted-end"  # after the counted windows; answered with the same once sampling stopped
ACK_TIMEOUT_S = 10.0
# Told to the trial server, in its environment, when the sweep starts it (see server_init):
# the sweep's main module, as multiprocessing names it to each new process.
MAIN_NAME_VAR = "LOADTUNE_SWEEP_MAIN_NAME"
MAIN_PATH_VAR = "LOADTUNE_SWEEP_MAIN_PATH"
SYS_PATH_VAR = "LOADTUNE_SWEEP_SYS_PATH"


class SweepChannel:
    """The protocol over the pipe to the sweep; with no pipe (a trial run in-process), every
    question is answered at once."""

    def __init__(self, conn: Any = None) -> None:
        self.conn = conn
        self.asked_at: float | None = None
        self._held: list[Any] = []

    def hold(self, part: Any) -> None:
        """Keep `part` (a loader, its last iterator) alive until the result is sent: its workers'
        shutdown (0.05-0.15 s with workers) then follows the answer instead of delaying it, and
        the sweep, which has what it asked for, ends the trial's tree at once."""
        self._held.append(part)

    def release(self) -> None:
        self._held.clear()

    def start_sampling(self, main_pids: tuple[int, ...] = ()) -> None:
        """Tell the sweep to start sampling, without waiting: the warm-up runs on meanwhile (a
        pause would let the workers fill the queue and flatter the window). `main_pids` are the
        ranks' processes, each a training loop's main process."""
        self.asked_at = time.monotonic()
        if self.conn is not None:
            try:
                self.conn.send((COUNTED_START, main_pids))
            except (OSError, ValueError):
                pass

    def sampling_ready(self) -> bool:
        """Whether the sweep's first reading is done (or it is not answering), checked between
        warm-up batches without blocking."""
        if self.conn is None or self.asked_at is None or time.monotonic() - self.asked_at > ACK_TIMEOUT_S:
            return True
        try:
            if self.conn.poll(0):
                self.conn.recv()  # SAMPLING: the only message sent before COUNTED_END's answer
                return True
        except (OSError, EOFError, ValueError):
            return True
        return False

    def end_sampling(self, wait: bool = True) -> None:
        """Tell the sweep the counted windows are over and wait until it has taken its last
        sample, before the workers are torn down; or, where the workers are held until the sweep
        has the result (hold), go on at once: they live on while it samples them."""
        if self.conn is None:
            return
        try:
            self.conn.send(COUNTED_END)
            if not wait:
                return
            deadline = time.monotonic() + ACK_TIMEOUT_S
            while self.conn.poll(max(0.0, deadline - time.monotonic())):
                if self.conn.recv() == COUNTED_END:  # a late SAMPLING answer is passed over
                    return
        except (OSError, EOFError, ValueError):
            pass

    def send_result(self, result: tuple[str, Any]) -> None:
        """The one message that ends the trial: ('ok', result) or ('failed', why)."""
        try:
            if self.conn is not None:
                self.conn.send(result)
                if self._held:
                    self._until_closed()
                self.conn.close()
        except (OSError, ValueError):  # the sweep stopped waiting (interrupted): nobody to tell
            pass
        finally:
            self.release()  # the held workers shut down now, unless the sweep ended them first

    def _until_closed(self) -> None:
        """Wait (ACK_TIMEOUT_S at most) until the sweep ends this tree or closes its end: its last
        sample of the held workers may still be under way when the result is sent."""
        deadline = time.monotonic() + ACK_TIMEOUT_S
        try:
            while self.conn.poll(max(0.0, deadline - time.monotonic())):
                self.conn.recv()  # the answer to COUNTED_END, passed over
        except (OSError, EOFError, ValueError):
            pass
