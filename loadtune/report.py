"""What the user reads: the ranked table, the ready-to-paste DataLoader line, the JSON summary.

Builds renderables and plain data; printing is the CLI's job.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from rich.table import Table
from rich.text import Text

from loadtune.plan import Trial
from loadtune.stats import Interval, unstable_note

# DataLoader's own defaults: a keyword left at its default is not written in the line.
LOADER_DEFAULTS = {"batch_size": 1, "shuffle": False, "num_workers": 0, "prefetch_factor": None,
                   "persistent_workers": False, "pin_memory": False, "drop_last": False, "timeout": 0.0,
                   "collate_fn": None, "worker_init_fn": None, "multiprocessing_context": None,
                   "in_order": True}
ALWAYS_SHOWN = ("batch_size", "num_workers")
TRIAL_WIDTH_MAX = 48
STATUS_STYLE = {"ok": "", "skipped": "dim", "failed": "red", "timeout": "red"}


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def dataloader_line(trial: Trial) -> str:
    """The trial's settings as a DataLoader call a user can paste into a training script."""
    parts = ["dataset"]
    for key, value in trial.loader_kwargs.items():
        if key not in ALWAYS_SHOWN and value == LOADER_DEFAULTS.get(key, object()):
            continue
        if key in ("collate_fn", "worker_init_fn"):
            value_text = str(value).rpartition(":")[2]
        else:
            value_text = repr(value)
        parts.append(f"{key}={value_text}")
    return f"DataLoader({', '.join(parts)})"


def _interval(row: Mapping[str, Any], key: str, digits: int) -> str:
    return f"{_fmt(row.get(key), digits)} [{_fmt(row.get(key + '_lo'), digits)}, {_fmt(row.get(key + '_hi'), digits)}]"


def results_table(rows: Sequence[Mapping[str, Any]], title: str = "") -> Table:
    """The ranked table: `=` marks trials tied with the best; rows that did not run are dimmed."""
    table = Table(title=title or None, header_style="bold", caption_justify="left")
    longest = max((len(str(r["trial"])) for r in rows), default=5)
    for name in ("rank", "trial", "samples/s [95% CI]", "wait ratio [95% CI]", "speedup", "% of ideal",
                 "wait ms", "p95 ms", "step ms", "1st batch s", "epoch start ms"):
        if name == "trial":
            table.add_column(name, justify="left", no_wrap=True, min_width=min(longest, TRIAL_WIDTH_MAX))
        elif "CI" in name:
            table.add_column(name, justify="right", no_wrap=True)
        else:
            table.add_column(name, justify="right")
    for r in rows:
        status = r.get("status", "")
        if status != "ok":
            table.add_row("-", Text(str(r["trial"])), Text(status, style=STATUS_STYLE.get(status, "")),
                          *([""] * 8), style="dim")
            continue
        mark = "=" if r.get("tied_with_best") else ""
        table.add_row(
            f"{mark}{_fmt(r.get('rank'))}" if r.get("rank") is not None else "ref",
            Text(str(r["trial"])),
            _interval(r, "throughput", 1),
            _interval(r, "wait_ratio", 3),
            _fmt(r.get("speedup")),
            _fmt(r.get("pct_of_ideal"), 1),
            _fmt(r.get("wait_ms"), 1),
            _fmt(r.get("wait_p95_ms"), 1),
            _fmt(r.get("step_ms"), 1),
            _fmt(r.get("first_batch_s"), 2),
            _fmt(r.get("epoch_start_ms"), 1),
            style="bold" if r.get("rank") == 1 else "",
        )
    return table


def not_run_lines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    return [f"{r['trial']}: {r['status']}: {r.get('reason') or 'no reason given'}"
            for r in rows if r.get("status") != "ok"]


def _brief(row: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if row is None:
        return None
    keys = ("trial", "rank", "status", "throughput", "throughput_lo", "throughput_hi", "wait_ratio",
            "wait_ratio_lo", "wait_ratio_hi", "speedup", "tied_with_best", "num_workers",
            "prefetch_factor", "persistent_workers", "pin_memory", "batch_size", "pct_of_ideal", "verdict", "advice")
    return {k: row.get(k) for k in keys}


def summary(rows: Sequence[Mapping[str, Any]], chosen: Mapping[str, Any] | None,
            trials: Mapping[str, Trial], meta: Mapping[str, Any]) -> dict[str, Any]:
    """Plain data for --json and for the closing lines of the terminal output."""
    baseline = next((r for r in rows if r["trial"] == "baseline"), None)
    ideal = next((r for r in rows if r["trial"] == "ideal" and r.get("status") == "ok"), None)
    best = next((r for r in rows if r.get("rank") == 1), None)
    return {
        **meta,
        "baseline": _brief(baseline),
        "ideal_throughput": ideal.get("throughput") if ideal else None,
        "best": _brief(best),
        "recommended": _brief(chosen),
        "dataloader": dataloader_line(trials[chosen["trial"]]) if chosen else None,
        "trials": [_brief(r) | {"reason": r.get("reason") or None} for r in rows],
    }


def summary_lines(info: Mapping[str, Any]) -> list[str]:
    """The closing words: what won, by how much, what to paste, what to watch out for."""
    lines = []
    best, chosen, base = info.get("best"), info.get("recommended"), info.get("baseline")
    if chosen is None:
        return ["No trial ran successfully: see the reason column of the CSV."]
    gain = f" ({chosen['speedup']:.2f}x the baseline)" if chosen.get("speedup") else ""
    if chosen.get("pct_of_ideal") is not None:
        gain += f", {chosen['pct_of_ideal']:.0f}% of the ideal (the step fed from memory)"
    lines.append(f"Recommended: {chosen['trial']}: {chosen['throughput']:.1f} samples/s, "
                 f"wait ratio {chosen['wait_ratio']:.3f}{gain}")
    if best and best["trial"] != chosen["trial"]:
        lines.append(f"  {best['trial']} measured fastest but is within noise of it; "
                     "the recommendation is the cheapest of the tied trials (fewest workers).")
    if base and base.get("wait_ratio") is not None:
        lines.append(f"Baseline: {base['throughput']:.1f} samples/s, wait ratio {base['wait_ratio']:.3f}")
    lines.append(f"Paste: {info['dataloader']}")
    for label, row in (("baseline", base), ("recommended", chosen)):
        if row and row.get("verdict"):
            lines.append(f"Bottleneck ({label}, {row['trial']}): {row['verdict']}. {row.get('advice') or ''}".rstrip())
        if base and chosen and base["trial"] == chosen["trial"]:
            break
    lines.extend(_ranks_lines(info, chosen))
    if info.get("scale") is not None:
        scaled = f" ({info['scaled']})" if info.get("scaled") else ""
        lines.append(f"Measured at scale x{info['scale']:g}{scaled}. The bottleneck moves with data, ranks and "
                     "machine: rerun with --scale, or on the target machine, and check with loadtune compare.")
    return lines


def _ranks_lines(info: Mapping[str, Any], chosen: Mapping[str, Any]) -> list[str]:
    """With ranks: where the winner stands against a one-rank sweep of the same config."""
    ranks = info.get("ranks") or 1
    if ranks <= 1:
        return []
    one = info.get("one_rank")
    if not one:
        how = "launch one process, without torchrun," if info.get("torchrun") else "run the same command without --ranks"
        if info.get("out_given"):
            where = " and with another --out"
        else:
            where = f" (it writes {info['one_rank_csv']})" if info.get("one_rank_csv") else ""
        return [f"With {ranks} ranks, throughput is summed over the ranks. To see how the winner moves, "
                f"{how}{where} and compare the two CSVs with loadtune compare."]
    moved = "the winner moved" if one["trial"] != chosen["trial"] else "the winner holds"
    return [f"With 1 rank ({one['csv']}): {one['trial']}, {one['throughput']:.1f} samples/s; with {ranks} ranks: "
            f"{chosen['trial']}, {chosen['throughput']:.1f} samples/s in all: {moved}. Tune at the rank count "
            f"you train with."]


LEGEND = (
    "rank: 1 = best by throughput; '=' marks trials within noise of the best (their 95% intervals "
    "overlap the leader's); 'ref' is the ideal (the step fed from memory), not a setting.",
    "wait ratio: share of the loop spent waiting for data and copying it to the device; "
    "speedup: throughput / baseline; % of ideal: throughput / the ideal's.",
    "wait / p95 ms: mean and 95th percentile wait per counted batch; 1st batch s: worker start-up; "
    "epoch start ms: mean wait at each new epoch (persistent_workers lowers it).",
)


def noise_warnings(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The unstable-result warnings of a CSV's rows that ran, as the sweep gave them."""
    notes = []
    for r in rows:
        mean, lo, hi = r.get("throughput"), r.get("throughput_lo"), r.get("throughput_hi")
        if r.get("status") == "ok" and mean and lo is not None and hi is not None:
            note = unstable_note(str(r["trial"]), Interval(mean, lo, hi))
            if note:
                notes.append(note)
    return notes


def report_title(rows: Sequence[Mapping[str, Any]], source: str) -> str:
    first = rows[0] if rows else {}
    parts = [str(first.get(k)) for k in ("config_name", "host", "device") if first.get(k)]
    if first.get("scale") is not None:
        parts.append(f"scale x{first['scale']:g}")
    if (first.get("ranks") or 1) > 1:
        parts.append(f"{first['ranks']} ranks")
    return f"{source}: " + ", ".join(parts) if parts else source
