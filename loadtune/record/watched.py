"""Rows measured in a real training run (status `watched`: `loadtune watch`, `loadtune.watch`) as
the offline readers take them: a loader's per-rank rows combined as a sweep records a trial on
ranks, the sweep space around a watched loader (what `loadtune predict` predicts from a run and
what `loadtune init --from` writes for `loadtune sweep` to measure), the loaders' other settings
kept beside the CSV (NAME.loader.json: a run's watched loaders, a sweep's trials), and how
`loadtune report` shows a run.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from loadtune.asked.config import THREAD_KEYS
from loadtune.asked.trials import LOADER_DEFAULTS, effective_settings, format_value
from loadtune.core.errors import ResultsError
from loadtune.record.record import Record
from loadtune.record.settings import SETTING_COLUMNS, recorded_settings
from loadtune.record.sidecar import replace_json

# Beside NAME.csv: the loaders' settings that are not columns (shuffle, drop_last, the collate
# function's name, the sampler's kind...), by trial: a run's watched loaders, a sweep's trials;
# {"<trial>": {"dataset", "loader_kwargs", "script", "argv"}}.
LOADER_SUFFIX = ".loader.json"
# A watched loader's row on one rank of several: "<name> rank <r>".
RANK_NAME = re.compile(r"^(?P<name>.+) rank (?P<rank>\d+)$")
# The settings that make a watched loader's config (the columns).
SETTING_KEYS = SETTING_COLUMNS

# The sweep around a watched loader. Worker counts tried: these, up to WORKERS_PER_CORE per usable
# core of a rank (a fetch that waits on storage, the network or a sleep gains from more workers
# than cores; one that is CPU work stops gaining at about one per core), and never fewer than
# WORKERS_TRIED_AT_LEAST, with the run's own count added.
WORKER_COUNTS = (0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
WORKERS_PER_CORE = 3
WORKERS_TRIED_AT_LEAST = 4
PREFETCH_FACTORS = (1, 2, 4)
PERSISTENT_WORKERS = (False, True)
PIN_MEMORY = (False, True)  # only with an accelerator: pinned memory only speeds up copies to one

# A run that waits for data less than this share of the time is fed: the live watch warns above it.
FED_WAIT_RATIO = 0.10

# Rank rows combined into one loader's row (combine_ranks): summed over the ranks (a sweep's row
# on ranks holds their sum), utilisations summed over the ranks' shares of the cores, the largest,
# and the ranks' mean (every other figure).
SUMMED = ("throughput", "throughput_lo", "throughput_hi", "window_throughput", "peak_pss_mb", "pss_growth_mb",
          "read_mb", "shm_need_mb")
UTILISATIONS = ("cpu_util", "main_cpu_util", "workers_cpu_util")
LARGEST = ("first_batch_s", "trial_wall_s", "outside_cpu")
MEAN = ("wait_ratio", "wait_ratio_lo", "wait_ratio_hi", "wait_ms", "wait_p95_ms", "h2d_ms", "step_ms",
        "epoch_start_ms", "h2d_gb_per_s", "fetch_ms", "fetch_cpu_share", "worker_idle_share", "handover_ms",
        "worker_pss_mb", "threads_per_worker")

# DataLoader keywords a paste line or a config's loader block may carry from NAME.loader.json.
LOADER_KEYWORDS = tuple(k for k in LOADER_DEFAULTS if k not in THREAD_KEYS)
SPEC_KEYWORDS = ("collate_fn", "worker_init_fn")
# Sampler kinds that shuffle / batch_size already say: nothing more to keep.
PLAIN_SAMPLERS = frozenset({"RandomSampler", "SequentialSampler", "BatchSampler"})
SAMPLER_KEYS = ("sampler", "batch_sampler")


# --- names and the loader file -------------------------------------------------------------------


def loader_name(record: Record) -> str:
    """The watched loader a row belongs to: its trial without " rank <r>" on a run of several ranks."""
    trial = record.trial or ""
    if record.watched and record.measuring.dist_rank is not None and (record.measuring.ranks or 1) > 1:
        found = RANK_NAME.match(trial)
        if found:
            return found.group("name")
    return trial


def loader_file(csv_path: Path | str) -> Path:
    """Where the loaders' other settings go: NAME.loader.json beside NAME.csv."""
    path = Path(csv_path)
    return path.with_name(f"{path.stem}{LOADER_SUFFIX}")


def plain_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The settings NAME.loader.json keeps: plain values (None, bool, int, float, str)."""
    return {k: v for k, v in dict(settings).items() if v is None or isinstance(v, (bool, int, float, str))}


@dataclass(frozen=True)
class LoaderInfo:
    """What NAME.loader.json says of one loader: a watched loader, or a sweep's trial."""

    dataset: str | None = None  # "module:Class" of its dataset
    loader_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)  # plain values only
    script: str | None = None
    argv: tuple[str, ...] = ()


def read_loader_info(csv_path: Path | str) -> dict[str, LoaderInfo]:
    """NAME.loader.json beside the CSV, by trial; none when there is no such file. A file that is
    not that JSON is a ResultsError naming it."""
    path = loader_file(csv_path)
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResultsError(f"{path}: cannot read the watched loaders' settings: {exc}") from None
    if not isinstance(data, dict):
        raise ResultsError(f"{path}: not the watched loaders' settings: expected an object by trial name")
    out = {}
    for trial, entry in data.items():
        if not isinstance(entry, dict):
            raise ResultsError(f"{path}: {trial!r}: expected an object with dataset and loader_kwargs")
        kwargs = entry.get("loader_kwargs") or {}
        argv = entry.get("argv") or []
        if not isinstance(kwargs, dict) or not isinstance(argv, list):
            raise ResultsError(f"{path}: {trial!r}: loader_kwargs must be an object and argv a list")
        dataset, script = entry.get("dataset"), entry.get("script")
        out[str(trial)] = LoaderInfo(str(dataset) if dataset else None, dict(kwargs),
                                     str(script) if script else None, tuple(str(a) for a in argv))
    return out


def write_loader_info(csv_path: Path | str, infos: Mapping[str, LoaderInfo]) -> Path:
    """NAME.loader.json beside the CSV, by trial (read_loader_info reads it back), replaced at once
    (written beside it, then renamed over it). A sweep writes its trials' loader settings
    (`{trial.name: LoaderInfo(loader_kwargs=plain_settings(trial.loader_kwargs))}`), so that
    `loadtune predict` pastes the settings the sweep's own answer does."""
    path = loader_file(csv_path)
    data = {trial: {"loader_kwargs": plain_settings(info.loader_kwargs), "dataset": info.dataset,
                    "script": info.script, "argv": list(info.argv)} for trial, info in infos.items()}
    return replace_json(path, data, "the loaders' settings")


def info_for(infos: Mapping[str, LoaderInfo], name: str) -> LoaderInfo | None:
    """A loader's entry: under its name, else under one of its ranks' trial names."""
    if name in infos:
        return infos[name]
    return next((info for trial, info in sorted(infos.items())
                 if (m := RANK_NAME.match(trial)) and m.group("name") == name), None)


# --- ranks ---------------------------------------------------------------------------------------


def _settings(record: Record) -> tuple[str, ...]:
    return tuple(format_value(record.column(k)) for k in SETTING_KEYS)


def combine_ranks(records: Sequence[Record]) -> list[Record]:
    """Each watched loader's rows on several ranks ("<name> rank <r>", the same settings) as one
    row, as a sweep records a trial on ranks: throughput summed over the ranks (a watched row's is
    its own rank's), the wait ratio the ranks' mean (wait_ratio_max_rank the largest), CPU and
    memory the ranks' together, `ranks` the world size, dist_rank empty; the text columns are the
    lowest rank's. A rank whose row is missing counts as the mean of those present. Every other
    row is kept as it is, in its place."""
    groups: dict[tuple[str, tuple[str, ...], int], list[Record]] = {}
    for r in records:
        if r.watched and r.ran and r.measuring.dist_rank is not None and (r.measuring.ranks or 1) > 1:
            groups.setdefault((loader_name(r), _settings(r), int(r.measuring.ranks or 1)), []).append(r)
    out: list[Record] = []
    done: set[tuple[str, tuple[str, ...], int]] = set()
    for r in records:
        key = (loader_name(r), _settings(r), int(r.measuring.ranks or 1))
        if key not in groups or not any(r is member for member in groups[key]):
            out.append(r)
        elif key not in done:
            done.add(key)
            out.append(_combined(key[0], key[2], groups[key]))
    return out


def _cores(record: Record) -> float:
    cores = float(record.run.machine.cpu_count or 1)
    return min(cores, float(record.run.machine.cpu_quota)) if record.run.machine.cpu_quota else cores


def _combined(name: str, world: int, rows: Sequence[Record]) -> Record:
    rows = sorted(rows, key=lambda r: r.measuring.dist_rank or 0)
    scale = world / len(rows)  # the ranks missing count as the mean of those present

    def present(field: str) -> list[float]:
        return [float(v) for r in rows if (v := r.column(field)) is not None]

    values: dict[str, Any] = {}
    for field in SUMMED:
        got = present(field)
        values[field] = sum(got) * world / len(got) if got else None
    for field in MEAN:
        got = present(field)
        values[field] = sum(got) / len(got) if got else None
    for field in LARGEST:
        got = present(field)
        values[field] = max(got) if got else None
    # Utilisations are shares of a host's usable cores: summed as CPU seconds over every host's cores.
    hosts = {r.run.machine.host or "": _cores(r) for r in rows}
    total_cores = sum(hosts.values())
    for field in UTILISATIONS:
        shares = [(float(v), _cores(r)) for r in rows if (v := r.column(field)) is not None]
        values[field] = sum(u * c for u, c in shares) * scale / total_cores if shares else None
    waits = present("wait_ratio")
    values["wait_ratio_max_rank"] = max(waits) if waits else None
    if len(hosts) > 1:  # ranks on several hosts: the cores of them all, shared by every rank
        values.update(cpu_count=int(round(total_cores)), cpu_quota=None, host=",".join(sorted(hosts)))
    reasons = list(dict.fromkeys(r.reason for r in rows if r.reason))
    repeats = [r.measuring.repeats for r in rows if r.measuring.repeats is not None]
    return Record.rounded(**{**rows[0].to_dict(), **values, "trial": name, "dist_rank": None, "ranks": world,
                             "reason": "; ".join(reasons) or None, "repeats": min(repeats) if repeats else None})


# --- the loaders of a run ------------------------------------------------------------------------


def run_seconds(record: Record) -> float:
    """Seconds the run's loop spent on a (combined) watched loader's counted batches, per rank."""
    if not record.throughput or not record.measuring.batches or not record.settings.batch_size:
        return 0.0
    return record.measuring.batches * record.settings.batch_size * (record.measuring.ranks or 1) / record.throughput


def loaders(records: Sequence[Record]) -> list[Record]:
    """The watched loaders of a file, their ranks combined, the one the run spent most time in first."""
    rows = [r for r in combine_ranks(records) if r.watched and r.ran]
    return sorted(rows, key=lambda r: -run_seconds(r))


def for_prediction(records: Sequence[Record]) -> tuple[list[Record], str | None]:
    """The records the pipeline model may be fitted to: ranks combined, and of several watched
    loaders (each its own pipeline: its dataset, its transforms) the one the run spent most time
    in, with a note naming the others."""
    combined = combine_ranks(records)
    watched = loaders(combined)
    if len(watched) <= 1:
        return combined, None
    kept, others = watched[0], [r.trial or "" for r in watched[1:]]
    rows = [r for r in combined if not r.watched or r is kept]
    return rows, (f"the run watched {len(watched)} loaders, each its own pipeline: predicted for {kept.trial}, "
                  f"the one it spent most time in (not {', '.join(others)})")


# --- the sweep around a watched loader -----------------------------------------------------------


def on_accelerator(record: Record) -> bool:
    """Whether the row was measured feeding an accelerator (its device, else its gpu column)."""
    if record.run.machine.device:
        return not record.run.machine.device.lower().startswith("cpu")
    return bool(record.run.machine.gpu)


def cores_per_rank(record: Record) -> float:
    """A rank's share of the usable cores (affinity and quota) its row was measured on."""
    return max(_cores(record) / max(int(record.measuring.ranks or 1), 1), 1.0)


def default_sweep(record: Record) -> dict[str, list[Any]]:
    """The values to try around a watched loader (its own among them), as a config's `sweep`
    block lists them: worker counts up to WORKERS_PER_CORE per usable core of a rank (at least
    WORKERS_TRIED_AT_LEAST), PREFETCH_FACTORS, persistent workers or not, and pinned memory or
    not where it fed an accelerator."""
    own = effective_settings(recorded_settings(record))
    most = max(WORKERS_TRIED_AT_LEAST, WORKERS_PER_CORE * cores_per_rank(record))
    workers = sorted({w for w in WORKER_COUNTS if w <= most} | {int(own["num_workers"] or 0)})
    prefetch = sorted({*PREFETCH_FACTORS, *([own["prefetch_factor"]] if own["prefetch_factor"] else [])})
    pins = list(PIN_MEMORY) if on_accelerator(record) else [bool(own["pin_memory"])]
    return {"num_workers": workers, "prefetch_factor": prefetch, "persistent_workers": list(PERSISTENT_WORKERS),
            "pin_memory": pins}


# --- the loader's other settings -----------------------------------------------------------------


def kept_settings(info: LoaderInfo | None) -> tuple[dict[str, Any], list[str]]:
    """The watched loader's DataLoader keywords beyond the swept settings, as a paste line or a
    loader block carries them (plain values only), and the other things it had that neither can
    carry (a sampler of its own), as `key=value` words to keep as they are."""
    if info is None:
        return {}, []
    kept: dict[str, Any] = {}
    aside: list[str] = []
    for key, value in info.loader_kwargs.items():
        if key in SETTING_KEYS or value is None:
            continue
        if key in LOADER_KEYWORDS and isinstance(value, (bool, int, float, str)):
            kept[key] = value
        elif key in SAMPLER_KEYS and str(value) in PLAIN_SAMPLERS:
            continue
        elif key != "dataset":
            aside.append(f"{key}={value}")
    return kept, aside


def is_run(records: Sequence[Record]) -> bool:
    """A file of a real training run: it holds watched rows and no sweep trial that ran."""
    return any(r.watched for r in records) and not any(r.ran and not r.watched for r in records)

