"""How every command words a config: the settings a row records (SETTING_COLUMNS), its name
(config_name) and the DataLoader line to paste (dataloader_line), the same from the sweep,
`loadtune predict`, `compare` and the readers of a watched run."""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from loadtune.asked.config import THREAD_KEYS, WORKER_ONLY
from loadtune.asked.trials import BASELINE, DEFAULT_PREFETCH, LOADER_DEFAULTS, effective_settings, format_value
from loadtune.record.record import Record

# Shown in a paste line even at DataLoader's default: what a reader looks for first.
ALWAYS_SHOWN = ("batch_size", "num_workers")
# Specs ("module:callable") whose callable a paste line names by itself.
SPEC_KEYS = ("collate_fn", "worker_init_fn")
# The settings a results row records as columns (a config's identity), in the order a name lists them.
SETTING_COLUMNS = ("num_workers", "prefetch_factor", "persistent_workers", "pin_memory", "batch_size", "main_threads",
                   "worker_threads")
# The order a config's name gives its settings: the swept ones first, as a sweep block lists them.
NAME_ORDER = ("num_workers", "prefetch_factor", "persistent_workers", "pin_memory", "batch_size", "main_threads",
              "worker_threads")

def loader_order(keys: Iterable[str]) -> list[str]:
    """Setting names in the order a config's loader block lists them (DataLoader's own keywords
    first, as LOADER_DEFAULTS has them), then any others as given."""
    keys = list(dict.fromkeys(keys))
    return [k for k in LOADER_DEFAULTS if k in keys] + [k for k in keys if k not in LOADER_DEFAULTS]


def applied(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Every setting as DataLoader applies it: prefetch_factor 2 where workers leave it unset; the
    settings that need workers at their defaults without them."""
    out = {**settings, **effective_settings(settings)}
    if not out.get("num_workers"):
        out.update({k: v for k, v in WORKER_ONLY.items() if k in out})
    return out


def recorded_settings(record: Record) -> dict[str, Any]:
    """A row's settings, as far as its columns hold them (SETTING_COLUMNS that are set), by name."""
    return {k: v for k in SETTING_COLUMNS if (v := record.column(k)) is not None}


def loader_keywords(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The settings that are DataLoader keywords: all but the thread settings (THREAD_KEYS)."""
    return {k: v for k, v in settings.items() if k not in THREAD_KEYS}


def thread_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The thread settings that are set (main_threads: torch's threads in the training process;
    worker_threads: in each worker), which no DataLoader keyword carries."""
    return {k: settings[k] for k in THREAD_KEYS if settings.get(k) is not None}


# --- names ---------------------------------------------------------------------------------------


def config_name(settings: Mapping[str, Any], baseline: Mapping[str, Any] | None = None,
                shown: Sequence[str] | None = None, order: Sequence[str] = ()) -> str:
    """How every command names a config, as a sweep names its trials: `key=value` joined by ", ",
    each value as YAML writes it (format_value: a name pastes into --set). With `baseline`, the
    settings that differ from it as DataLoader applies both (prefetch_factor unset is 2 with
    workers), or `baseline` where none does; without, num_workers and every setting of `shown`
    that is set (all that are set when None). A setting that needs workers is never named
    without them. The keys of `order` come first (a sweep's: its sweep block's), then the swept
    settings (NAME_ORDER), then the rest in the loader block's order."""
    s = applied(settings)
    workers = bool(s.get("num_workers"))
    if baseline is not None:
        base = applied(baseline)
        if workers and not base.get("num_workers"):
            # Without workers the baseline leaves their settings at DataLoader's defaults.
            base = {**base, **WORKER_ONLY, "prefetch_factor": DEFAULT_PREFETCH}
        named = [k for k in s if format_value(s[k]) != format_value(base.get(k, LOADER_DEFAULTS.get(k)))]
    else:
        named = [k for k in s if k == "num_workers" or (s[k] is not None and (shown is None or k in shown))]
    named = [k for k in named if workers or k not in WORKER_ONLY]
    if not named:
        return BASELINE if baseline is not None else ""
    first = [k for k in (*order, *NAME_ORDER) if k in named]
    keys = [*dict.fromkeys(first), *loader_order(k for k in named if k not in first)]
    return ", ".join(f"{k}={format_value(s[k])}" for k in keys)


# --- the line to paste ---------------------------------------------------------------------------


def dataloader_line(loader_kwargs: Mapping[str, Any]) -> str:
    """A config's settings as a DataLoader call a user can paste into a training script (the one
    builder: the sweep's answer, `loadtune predict`'s), in the loader block's order whatever the
    mapping's: keywords at DataLoader's default left out (batch_size and num_workers always
    shown), a spec's callable by its own name, and the thread settings (not DataLoader keywords)
    as the calls that make them."""
    threads = []
    if loader_kwargs.get("main_threads") is not None:
        threads.append(f"torch.set_num_threads({loader_kwargs['main_threads']}) in the training process")
    if loader_kwargs.get("worker_threads") is not None:
        threads.append(f"torch.set_num_threads({loader_kwargs['worker_threads']}) and "
                       f"threadpoolctl.threadpool_limits({loader_kwargs['worker_threads']}) in worker_init_fn")
    parts = ["dataset"]
    for key in loader_order(loader_keywords(loader_kwargs)):
        value = loader_kwargs[key]
        if key not in ALWAYS_SHOWN and key in LOADER_DEFAULTS and value == LOADER_DEFAULTS[key]:
            continue
        text = str(value).rpartition(":")[2] if key in SPEC_KEYS else repr(value)
        parts.append(f"{key}={text}")
    return f"DataLoader({', '.join(parts)})" + "".join(f"; {t}" for t in threads)


def paste_settings(settings: Mapping[str, Any], kept: Mapping[str, Any]) -> dict[str, Any]:
    """A config's settings with the loader's other keywords (`kept`: shuffle, drop_last, …), in
    the loader block's order; those that need workers dropped without them."""
    merged = {**kept, **{k: v for k, v in settings.items() if v is not None}}
    if not merged.get("num_workers"):
        merged = {k: v for k, v in merged.items() if k not in WORKER_ONLY}
    return {k: merged[k] for k in loader_order(merged)}
