"""`loadtune init`: a commented starter config that documents every key (docs/reference.md,
"Config reference") and runs as is.

It points at the built-in demo dataset and uses short measurements, so the first sweep
takes about a minute; the comments say what to change for a real training job.
"""

from __future__ import annotations

from pathlib import Path

from loadtune.errors import LoadtuneError

DEFAULT_STARTER_PATH = "loadtune.yaml"

STARTER_CONFIG = """\
# loadtune sweep config: which DataLoader settings keep the accelerator fed?
#
#   loadtune sweep THIS_FILE                  measure, write a ranked CSV, print the winner
#   loadtune sweep THIS_FILE --plot out.png   ... and draw it
#   loadtune profile THIS_FILE                where the baseline's time goes (torch.profiler)
#
# As written it measures the built-in demo (1000 generated JPEGs, decoded and augmented)
# with short windows, so it runs in about a minute (the first run also generates the images
# once into ~/.cache/loadtune). Point `dataset` and `step` at your own code, then raise
# `measure` for figures you can trust. Every key below shows its default when left out.
# Any key can be overridden for one run: --set loader.batch_size=64 --set measure.repeats=5

# name: used in the default output file name, results/<name>-<host>-x<scale>.csv.
# Letters, digits, '.', '_' and '-'. Default: this file's name without .yaml.
# name: my-training-data

dataset:
  # factory (required): "pkg.module:callable", or "path/to/file.py:callable" relative to
  # this file. Called with `kwargs`; must return a torch Dataset (map-style or iterable).
  factory: loadtune.demo:synthetic_images
  # kwargs: keyword arguments for the factory. Default: {}.
  kwargs: {num_images: 1000}
  # scale_kwarg: the kwarg that `--scale K` multiplies (rounded, at least 1), so one config
  # can measure a small and a full-size dataset. Must be a key of kwargs. Default: null.
  scale_kwarg: num_images

# loader: the baseline DataLoader, i.e. what your training script uses today. Any
# DataLoader keyword but `dataset`; a key left out takes DataLoader's own default.
loader:
  batch_size: 32               # samples per batch. Default: 1.
  shuffle: true                # reshuffle every epoch. Default: false.
  num_workers: 1               # worker processes; 0 loads in the main process. Default: 0.
  prefetch_factor: 2           # batches loaded ahead per worker; needs num_workers > 0.
                               # Default: null (DataLoader uses 2 when there are workers).
  persistent_workers: false    # keep workers alive between epochs; needs num_workers > 0.
                               # Default: false.
  pin_memory: false            # page-locked batches for faster copies to a GPU (skipped
                               # without one). Default: false.
  collate_fn: null             # "module:callable" or "file.py:callable" that merges samples
                               # into a batch. Default: null (DataLoader's default_collate).
  # The other DataLoader keywords, at their defaults:
  # drop_last: false           # drop the last incomplete batch of an epoch.
  # timeout: 0.0               # seconds to wait for a batch from a worker; 0 waits forever.
  # worker_init_fn: null       # "module:callable" run in each worker at start.
  # multiprocessing_context: null   # fork, spawn or forkserver; null: the platform's default.
  # in_order: true             # yield batches in order (false lets a fast worker go first).
  # main_threads: null         # torch threads of the training process; null: unchanged.
  # worker_threads: null       # torch and OpenMP/BLAS threads in each worker; null: unchanged.

# sweep: the values to try, one change at a time from the baseline first; each differing value
# is a trial of its own. The default strategy (model) then predicts every combination and
# measures only what it cannot rule out (--strategy ofat: follow-up rounds on the winner).
# Any loader key but collate_fn / worker_init_fn can be swept. Combinations DataLoader refuses (prefetch_factor
# or persistent_workers without workers) and pin_memory without a GPU are reported as
# skipped, not run. Default: {} (only the baseline is measured).
sweep:
  num_workers: [0, 2, 4]
  prefetch_factor: [4]
  persistent_workers: [true]
  pin_memory: [true]

# step: what one training step costs, run on each batch once it is on the device.
# Give exactly one of sleep_s, busy_s or factory (required).
step:
  sleep_s: 0.05                # stand-in for accelerator compute: the host waits, using no CPU.
  # busy_s: 0.05               # stand-in that burns main-process CPU for that long
                               # (a host-side step that competes with the workers for cores).
  # factory: "train.py:make_step"  # your own step: returns a callable(batch) -> None; gets
                               # device= when it accepts it. Path relative to this file.
  # kwargs: {}                 # keyword arguments for step.factory (only with factory).

# measure: how long each trial is measured. These are short, for a first look; the
# defaults (warmup_batches 5, batches 50, repeats 3) give tighter intervals.
measure:
  warmup_batches: 2            # first batches of a trial not counted (the time to the first
                               # batch is kept apart). Default: 5.
  warmup_batches_per_worker: 5  # and this many more per worker: a worker's first batches
                               # come slower (not for workers that are not persistent, when
                               # an epoch is no longer than `batches`). Default: 5.
  warmup_per_worker_max_s: 0.3  # the most seconds those take (long batches dilute the
                               # slowness). Default: 0.3.
  batches: 10                  # counted batches per repeat. Default: 50.
  epoch_batches: null          # end an epoch every N batches, so epoch starts show; null:
                               # at the dataset's end. Default: null.
  run_epoch_batches: null      # batches per epoch in your training run: each epoch start
                               # counts once per that many; null: the DataLoader's length.
  repeats: 2                   # the most independent repeats a trial gets (racing gives
                               # them to the close contenders). Default: 3.
  min_repeats: 1               # repeats every trial gets first; trials clearly behind stop
                               # there. Default: 1.
  tolerance: 0.03              # trials within this share of the best's throughput (shown, or
                               # expected) are tied; the cheapest is recommended. Default: 0.03.
  budget_s: null               # seconds after which racing adds no more repeats. Default: null.
  max_outside_cpu: 0.25        # share of the cores other processes may use during a window
                               # before it is measured again. Default: 0.25.
  timeout_s: 120               # per trial; past it the trial is stopped and marked timeout.
                               # Default: 300.

# device: auto, cpu, cuda or cuda:N. auto picks the accelerator when there is one.
# Default: auto. With --ranks N, each rank uses cuda:LOCAL_RANK.
device: auto

# output: the CSV to write (relative to where loadtune runs). Default: null, meaning
# results/<name>-<host>-x<scale>.csv; --out overrides it.
output: null
"""


def write_starter(path: Path | str = DEFAULT_STARTER_PATH) -> Path:
    """Write STARTER_CONFIG to `path` (creating its folder); never overwrites an existing file."""
    path = Path(path)
    if path.exists() or path.is_symlink():
        raise LoadtuneError(f"{path}: already exists; not overwriting it (remove it or give another path)")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("x", encoding="utf-8") as f:  # "x": fails rather than replace a file
            f.write(STARTER_CONFIG)
    except FileExistsError:
        raise LoadtuneError(f"{path}: already exists; not overwriting it (remove it or give another path)") from None
    except OSError as exc:
        raise LoadtuneError(f"{path}: cannot write the starter config: {exc.strerror or exc}") from None
    return path
