"""`loadtune predict`'s output: the predicted table, the closing lines, and the CSV of
predicted rows."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from rich.table import Table
from rich.text import Text

from loadtune.asked.trials import format_value
from loadtune.core.errors import ResultsError
from loadtune.core.text import fmt
from loadtune.decide.choice import within_tolerance
from loadtune.model.predict_values import Forecast, ResolvedTarget, TargetRow
from loadtune.present.report import short_trial
from loadtune.present.table import Column, fitted_table
from loadtune.record.findings import CheaperWaitsMore
from loadtune.record.settings import dataloader_line, paste_settings


def target_text(target: ResolvedTarget) -> str:
    cores = f"{target.cores:g} usable core{'' if target.cores == 1 else 's'}"
    ranks = f"{target.ranks} rank{'' if target.ranks == 1 else 's'}"
    return f"{cores}, {ranks}, a {target.step_ms:.1f} ms step"


def forecast_table(f: Forecast, width: int | None = None) -> Table:
    """Every config of the space, best first (TargetRow.figure): samples/s predicted (all ranks;
    per rank with several), wait ratio, what the source measured where it is the same machine,
    memory where a config does not fit; the recommendation marked. At `width`, the least
    important columns are left out, and config names shortened, rather than a figure cut."""
    ranks = f.target.ranks > 1
    measured = any(r.measured_throughput is not None for r in f.rows)
    memory = any(not r.memory.fits for r in f.rows) or f.target.scale != f.source.scale
    notes = tuple(Text("recommended", style="bold green") if r.recommended else
                  Text("does not fit" if not r.memory.fits else "", style="yellow") for r in f.rows)
    figures = [Column("samples/s", tuple(f"{r.predicted_throughput:.1f}" for r in f.rows))]
    if ranks:
        figures.append(Column("per rank", tuple(f"{r.predicted_throughput_per_rank:.1f}" for r in f.rows), priority=2))
    figures.append(Column("wait ratio", tuple(f"{r.predicted_wait_ratio:.3f}" for r in f.rows), priority=1))
    if measured:
        # what the recommendation goes by where it was measured (TargetRow.figure): kept before the wait ratio
        figures.append(Column("measured", tuple(fmt(r.measured_throughput, 1) for r in f.rows), priority=1))
    if memory:
        figures.append(Column("RAM GB", tuple(fmt(r.memory.ram_gb, 1) for r in f.rows), priority=1))

    def columns(names: list[str]) -> list[Column]:
        styled = tuple(Text(n, style="bold" if r.recommended else "") for n, r in zip(names, f.rows))
        return [Column("config", styled, "left", names=True), *figures, Column("", notes, "left")]

    names = [r.config for r in f.rows]
    short = [short_trial(n) for n in names]
    return fitted_table([columns(names), columns(short)], width, f"Predicted for {target_text(f.target)}")


def forecast_lines(f: Forecast) -> list[str]:
    """The closing words: the recommendation, what the sweep's own pick would lose there, what
    is extrapolated, what does not fit, and what to paste."""
    source = replace(f.target, cores=f.source.cores, ranks=f.source.ranks, step_ms=f.source.step_ms)
    measured = f"Measured on {target_text(source)}" + (f" (the run, {f.source.run} watched)" if f.source.run else "")
    if f.fit.model.trials == 1:
        lines = [f"{measured}; fitted to 1 measured config: the model could not be checked against a second "
                 "measured config, so how far off its predictions are here is not known"]
    else:
        lines = [f"{measured}; {f.fit.model.trials} trials fitted", str(f.model_error)]
    lines.extend(neutral_lines(f))
    pick = f.recommended
    if pick is None:
        return [*lines, *f.choice.notes]
    lines.append(recommended_line(f, pick))
    share, theirs = f.carried_share, f.choice.source_pick
    own = "The run's own settings" if f.source.run else "The sweep's own pick"
    if theirs is not None and share is not None and theirs.settings != pick.settings:
        # On the source's own machine, each figure that was measured there is the measurement.
        basis = "as measured on this machine" if theirs.measured and pick.measured else \
            "predicted" if not (theirs.measured or pick.measured) else "measured against predicted"
        if within_tolerance(share, 1.0, f.choice.tolerance):
            lines.append(f"{own} ({theirs.config}) would do as well there ({share:.2f} of it, {basis}); "
                         f"the recommendation costs less.")
        else:
            lines.append(f"{own} ({theirs.config}) would run {share:.2f} of that there ({basis}).")
    elif f.choice.source_pick is not None:
        lines.append("The run's own settings are the recommendation: keep them." if f.source.run else
                     "The sweep's own pick is the same: it travels.")
    lines += [f"Extrapolated: {e}." for e in f.extrapolated]
    unfit = [r for r in f.rows if not r.memory.fits]
    if unfit:
        lines.append(f"Does not fit: {len(unfit)} config{'' if len(unfit) == 1 else 's'}, e.g. {unfit[0].config}: "
                     f"{unfit[0].memory.why}.")
    lines += list(f.choice.notes)
    lines += [str(w) for w in wait_words(f)]
    aside = f"; keep {', '.join(f.carried.aside)} as in your code" if f.carried.aside else ""
    if f.carried.unknown_rest is not None:
        aside += (f"; keep your DataLoader's other settings (shuffle, drop_last, a sampler, ...) as in your code: "
                  f"no {f.carried.unknown_rest} beside the CSV says them")
    lines.append(f"Paste (each rank): {dataloader_line(paste_settings(pick.settings, f.carried.kept))}{aside}")
    return lines


def recommended_line(f: Forecast, pick: TargetRow) -> str:
    """The recommendation and its figures: what the source measured of it where the target is the
    source's own machine and it was measured there, else what the model predicts."""
    where = target_text(f.target)
    ranks = " in all" if f.target.ranks > 1 else ""
    chosen = f"the cheapest within {f.choice.tolerance:.0%} of the best"
    if pick.measured_throughput is not None:
        return (f"Recommended for {where}: {pick.config}: {pick.measured_throughput:.1f} samples/s{ranks} as measured "
                f"on this machine (predicted {pick.predicted_throughput:.1f}), wait ratio "
                f"{pick.predicted_wait_ratio:.3f} (predicted; {chosen})")
    return (f"Recommended for {where}: {pick.config}: {pick.predicted_throughput:.1f} samples/s{ranks}, wait ratio "
            f"{pick.predicted_wait_ratio:.3f} (predicted; {chosen})")


# The recommendation waits this much more (in wait ratio) than a config predicted as fast: said why.
WAITS_MORE = 0.10


def wait_words(f: Forecast) -> list[CheaperWaitsMore]:
    """Where the recommendation (the cheapest within the tolerance of the best samples/s) waits
    clearly more than a config predicted about as fast: why, in one line."""
    pick = f.recommended
    if pick is None:
        return []
    best = max(r.figure for r in f.rows if r.memory.fits)
    tied = [r for r in f.rows if r.memory.fits and r.figure >= (1 - f.choice.tolerance) * best]
    lean = min(tied, key=lambda r: r.predicted_wait_ratio)
    if pick.predicted_wait_ratio - lean.predicted_wait_ratio <= WAITS_MORE:
        return []
    return [CheaperWaitsMore(pick.config, pick.predicted_wait_ratio, lean.config, lean.predicted_wait_ratio,
                             lean.figure / pick.figure, f.choice.tolerance, f.target.ranks)]


# What each figure model.unshown_figures names costs, in words.
FIGURE_WORDS = {
    "handover_ms_per_sample": "the hand-over from workers",
    "worker_start_ms": "the workers' start at each epoch",
    "worker_start_per_worker_ms": "each more worker's start",
    "persistent_resume_ms": "persistent workers' resume",
    "worker_put_ms": "a worker's put into shared memory",
    "core_share": "crowded cores",
    "oversubscription": "",
    "h2d_pinned_ms": "the copy from pinned memory",
    "step_sync": "the step's threads waiting for each other on crowded cores",
}


def neutral_lines(f: Forecast) -> list[str]:
    """One line naming the figures no measured config shows, kept neutral, and the run that
    would show them (none where every figure a config predicted needs was measured); before it,
    the start figure read from the configs measured with and without persistent workers, if any."""
    read = [] if f.fit.read is None else [
        f"Persistent workers' effect read from the configs measured with and without them: "
        f"{FIGURE_WORDS.get(f.fit.read, f.fit.read)} ({f.fit.read}) set to {f.fit.model.figure(f.fit.read) or 0.0:.1f} "
        f"ms, so the model puts them as far apart as they measured."]
    if not f.fit.neutral:
        return read
    runs: dict[str, list[str]] = {}
    for name, run in f.fit.neutral:
        runs.setdefault(run, []).append(name)
    parts = []
    for run, names in runs.items():
        words = ", ".join(w for w in (FIGURE_WORDS.get(n, n) for n in names) if w)
        parts.append(f"{words} ({', '.join(names)}), shown by a run with {run}")
    return [*read, f"Kept neutral, as no measured config shows them (configs that need them are predicted without "
            f"that cost): {'; '.join(parts)}."]


def write_forecast(f: Forecast, path: Path | str) -> Path:
    """The predicted rows as CSV (Forecast.table_rows), booleans as true/false."""
    import pandas as pd

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [{k: format_value(v) if isinstance(v, bool) else v for k, v in row.items()} for row in f.table_rows()]
    frame = pd.DataFrame(rows, dtype=object)
    try:
        frame.to_csv(path, index=False)
    except OSError as exc:
        raise ResultsError(f"{path}: cannot write: {exc.strerror or exc}") from None
    return path

