"""`loadtune init`: a commented starter config that documents every key (docs/reference.md,
"Config reference") and runs as is.

It points at the built-in demo dataset and uses short measurements, so the first sweep
takes about a minute; the comments say what to change for a real training job.

`loadtune init --from FILE` writes one from a watched run instead (`from_run`): its loader block
holds the watched loader's settings, its sweep block the values `loadtune predict` predicts from
the run, its step the run's own as a stand-in; the dataset factory is the one thing a run cannot
say, left for the user to fill in.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from loadtune.core.errors import LoadtuneError

if TYPE_CHECKING:
    from loadtune.record.record import Record
    from loadtune.record.watched import LoaderInfo

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


def write_starter(path: Path | str = DEFAULT_STARTER_PATH, text: str = STARTER_CONFIG) -> Path:
    """Write `text` (STARTER_CONFIG) to `path` (creating its folder); never overwrites an existing file."""
    path = Path(path)
    if path.exists() or path.is_symlink():
        raise LoadtuneError(f"{path}: already exists; not overwriting it (remove it or give another path)")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("x", encoding="utf-8") as f:  # "x": fails rather than replace a file
            f.write(text)
    except FileExistsError:
        raise LoadtuneError(f"{path}: already exists; not overwriting it (remove it or give another path)") from None
    except OSError as exc:
        raise LoadtuneError(f"{path}: cannot write the starter config: {exc.strerror or exc}") from None
    return path


# --- from a watched run ----------------------------------------------------------------------------

# What dataset.factory says until the user fills it in: a run cannot say how its dataset is built.
FACTORY_PLACEHOLDER = "FILL_IN.py:make_dataset"
# The step when the run's row has none (a stand-in, in seconds).
DEFAULT_STEP_S = 0.05
STEP_DIGITS = 4  # sleep_s written to a tenth of a millisecond


def _yaml(value: Any) -> str:
    """A plain value as YAML writes it (strings quoted as JSON, which YAML reads alike)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(str(value))


def _name(text: str) -> str:
    """A config name (letters, digits, '.', '_', '-') from a script's or loader's name."""
    stem = text[:-3] if text.endswith(".py") else text
    cleaned = "".join(c if c.isalnum() or c in "._-" else "-" for c in stem).strip("-.")
    return cleaned or "watched"


def from_run(source: Path | str) -> tuple[str, str]:
    """The starter config's text for the loader a watched run spent most time in, and its name.
    Not a results CSV, or one without a watched row: a LoadtuneError naming the file."""
    from loadtune.record.record import load_records
    from loadtune.record.watched import info_for, loaders, read_loader_info

    source = Path(source)
    watched = loaders(load_records(source))
    if not watched:
        raise LoadtuneError(f"{source}: no watched row (status watched) that ran: init --from reads the CSV of a "
                            "watched run (loadtune watch, loadtune.watch)")
    loader = watched[0]
    name = loader.trial or "train"
    info = info_for(read_loader_info(source), name)
    lines = _header_lines(source, watched, name)
    lines += _dataset_lines(source, loader, name, info)
    lines += _loader_lines(loader, info)
    lines += _sweep_lines(source, loader)
    lines += _step_lines(loader)
    text = "\n".join(lines)
    _check(text, source)
    return text, name


def _header_lines(source: Path, watched: Sequence[Record], name: str) -> list[str]:
    """What the config is written from, and what to do with it."""
    from loadtune.present.watched_run import settings_text

    loader = watched[0]
    ranks = int(loader.measuring.ranks or 1)
    lines = [f"# loadtune sweep config written by `loadtune init --from {source}`: the loader {name!r} the run",
             f"# watched: {loader.throughput:.1f} samples/s{' in all' if ranks > 1 else ''}, wait ratio "
             f"{loader.wait_ratio:.3f}, with {settings_text(loader)}{f' on {ranks} ranks' if ranks > 1 else ''}.",
             "#",
             "#   1. Fill in dataset.factory below: a run cannot say how its dataset is built.",
             f"#   2. loadtune sweep THIS_FILE{f' --ranks {ranks}' if ranks > 1 else ''}"
             "      measures the settings around the run's own",
             f"#      (loadtune predict {source} says what the model expects of them, from the run alone).",
             "# Every key: docs/reference.md#config-reference; `loadtune init` writes a starter with each explained."]
    others = [r.trial for r in watched[1:]]
    if others:
        lines.append(f"# The run also watched {', '.join(str(o) for o in others)}: each its own pipeline; this is "
                     "the one it spent most time in.")
    return lines


def _dataset_lines(source: Path, loader: Record, name: str, info: LoaderInfo | None) -> list[str]:
    """The config's name and its dataset block: the factory left for the user to fill in."""
    script = Path(loader.run.config_name).stem if loader.run.config_name else ""
    config_name = _name("-".join(dict.fromkeys(part for part in (script, name) if part)))
    lines = ["", f"name: {config_name}", "", "dataset:",
             "  # FILL IN: \"path/to/file.py:callable\" (relative to this file) or \"pkg.module:callable\" that",
             "  # returns the dataset your script trains on, built as the script builds it; kwargs go to it."]
    dataset = info.dataset if info is not None else None
    if dataset:
        script = " ".join([info.script or "", *info.argv]).strip() if info is not None else ""
        ran = f" (run as: {script})" if script else ""
        lines += [f"  # The run's dataset was a {dataset}{ran};",
                  "  # its constructor's arguments are not known from the run. Where that class needs",
                  "  # only the kwargs below, name it instead:",
                  f"  # factory: {_yaml(dataset)}"]
    lines += [f"  factory: {_yaml(FACTORY_PLACEHOLDER)}", "  kwargs: {}", "",
              "# loader: the watched DataLoader's settings (the CSV's columns"
              f"{', and ' + source.stem + '.loader.json beside it' if info is not None else ''}).", "loader:"]
    return lines


def _loader_block(loader: Record, kept: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The loader block's settings: the row's, then each kept keyword the block takes; and
    those it refuses, as key=value."""
    from pydantic import ValidationError

    from loadtune.asked.config import LoaderSpec

    settings = {"batch_size": loader.settings.batch_size, "num_workers": int(loader.settings.num_workers or 0),
                "prefetch_factor": loader.settings.prefetch_factor if loader.settings.num_workers else None,
                "persistent_workers": (bool(loader.settings.persistent_workers) if loader.settings.num_workers
                                       else False),
                "pin_memory": bool(loader.settings.pin_memory), "main_threads": loader.settings.main_threads,
                "worker_threads": loader.settings.worker_threads if loader.settings.num_workers else None}
    block = {k: v for k, v in settings.items() if v is not None}
    refused = []
    for key, value in kept.items():
        if key in block:
            continue
        try:
            LoaderSpec.model_validate({**block, key: value})
        except ValidationError:
            refused.append(f"{key}={value!r}")
            continue
        block[key] = value
    return block, refused


def _loader_lines(loader: Record, info: LoaderInfo | None) -> list[str]:
    """The loader block's keys, then what of the watched loader it could not take."""
    from loadtune.record.watched import kept_settings

    kept, aside = kept_settings(info)
    block, refused = _loader_block(loader, kept)
    lines = [f"  {key}: {_yaml(value)}" for key, value in block.items()]
    for word in refused:
        lines.append(f"  # {word}: the run's, not a value the loader block takes")
    for word in aside:
        lines.append(f"  # {word}: not a loader key; to keep it, return your DataLoader from the factory "
                     "(docs/your-data.md)")
    return lines


def _sweep_lines(source: Path, loader: Record) -> list[str]:
    """The sweep block: the values predict predicts from the run."""
    from loadtune.record.watched import WORKERS_PER_CORE, cores_per_rank, default_sweep, on_accelerator

    sweep = default_sweep(loader)
    accelerator = on_accelerator(loader)
    lines = ["", f"# sweep: the values around the run's own that `loadtune predict {source}` predicts",
             f"# (up to {WORKERS_PER_CORE} workers per usable core of a rank: {cores_per_rank(loader):g} cores here).",
             "sweep:"]
    for key, values in sweep.items():
        if key == "pin_memory" and not accelerator:
            lines.append("  # pin_memory: [false, true]   # with an accelerator (the run fed the CPU)")
            continue
        lines.append(f"  {key}: [{', '.join(_yaml(v) for v in values)}]")
    return lines


def _step_lines(loader: Record) -> list[str]:
    """The step (the run's own as a stand-in that waits), measure, device and output."""
    step_s = round(loader.figures.step_ms / 1e3, STEP_DIGITS) if loader.figures.step_ms is not None else DEFAULT_STEP_S
    step_ms = loader.figures.step_ms
    measured = f"the run's step, {step_ms:.1f} ms a batch" if step_ms is not None else "a guess"
    lines = ["", f"# step: {measured}, as a stand-in that waits (no host CPU). For your own step",
             "# (its CPU competes with the workers): step.factory (docs/your-data.md).", "step:",
             f"  sleep_s: {_yaml(step_s)}", ""]
    epoch = loader.measuring.run_epoch_batches
    epoch_note = "   # the run's epoch in batches (each rank's share)" if epoch else ""
    device_note = f"   # the run used {loader.run.machine.device}" if loader.run.machine.device else ""
    lines += ["measure:", f"  run_epoch_batches: {_yaml(epoch)}{epoch_note}", "",
              f"device: auto{device_note}", "output: null", ""]
    return lines


def _check(text: str, source: Path) -> None:
    """The written config loads (its factory aside, which the user fills in): else a bug, said
    with the file it came from."""
    import yaml

    from loadtune.asked.config import Config

    try:
        Config.model_validate(yaml.safe_load(text))
    except Exception as exc:  # noqa: BLE001 - any failure here is one line naming the run's file
        raise LoadtuneError(f"{source}: the config written from this run does not load: {exc}") from None


def write_from_run(source: Path | str, path: Path | str = DEFAULT_STARTER_PATH) -> tuple[Path, str]:
    """Write the starter config from a watched run (from_run) to `path`; never overwrites a file.
    The written path and the loader it holds."""
    text, name = from_run(source)
    return write_starter(path, text), name
