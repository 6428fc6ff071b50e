"""Compare result CSVs of one config run on different machines, scales or days, and a sweep
against a real training run (a file of watched rows).

Rows are aligned by trial, columns by file. For each sweep: its winner, Kendall's tau-b between
its ranking and the first sweep's, and per trial the flags that say where the conclusion moved.
For each file of a run: what the first sweep measured or predicted for each watched loader's
config, beside what the run measured. Builds plain data (comparison.values); compare_text renders
it; printing and exit codes are the CLI's job.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from loadtune.asked.trials import BASELINE, COMBINED
from loadtune.comparison.checks import run_checks, transfer_check
from loadtune.comparison.values import (
    ABSENT,
    CONFIG_COLUMNS,
    DIFFERENCE_COLUMNS,
    FLAG_SEPARATOR,
    FLAGS_COLUMN,
    HELPS_TO_HURTS,
    HURTS_TO_HELPS,
    LABEL_SEPARATOR,
    PER_FILE_COLUMNS,
    RUN_COLUMNS,
    STATUS_CHANGED,
    TIE_GROUP_CHANGED,
    TRANSFER_COLUMN,
    TRIED_STATUSES,
    VERDICT_CANNOT_TELL,
    VERDICT_CHANGED,
    VERDICT_HOLDS,
    VERDICT_TIED,
    WINNER_CHANGED,
    WINNER_NOT_MEASURED,
    WINNER_WITHIN_NOISE,
    Checked,
    Comparison,
    Conclusion,
    Files,
    FileValue,
    ResultSet,
)
from loadtune.core.errors import ResultsError
from loadtune.core.kinds import Status
from loadtune.model.model import MODEL_COLUMNS
from loadtune.model.predict import names_of, settings_of
from loadtune.model.predict_values import RunCheck, TransferCheck
from loadtune.record.record import Record, load_records, missing_columns, plain_frame
from loadtune.record.settings import config_name
from loadtune.record.watched import combine_ranks, is_run

# --- reading -------------------------------------------------------------------------------


def _labels(paths: Sequence[Path]) -> list[str]:
    """File stems; where stems collide, the parent folder is put in front, then a counter."""
    stems = [p.stem or p.name for p in paths]
    labels = [f"{p.parent.name}/{stem}" if stems.count(stem) > 1 and p.parent.name else stem
              for p, stem in zip(paths, stems)]
    out: list[str] = []
    for base in labels:
        label, count = base, 1
        while label in out:
            count += 1
            label = f"{base}-{count}"
        out.append(label)
    return out


def _read(path: Path) -> tuple[list[Record], pd.DataFrame]:
    """A results CSV through the one reader: its records and their plain frame (see
    record.plain_frame; a run's loaders with their ranks combined, a `combined` trial by the name
    its config has in every sweep: named_combined)."""
    records = load_records(path)
    trials = [r.trial for r in records]
    duplicated = next((t for i, t in enumerate(trials) if t in trials[:i]), None)
    if duplicated is not None:
        raise ResultsError(f"{path}: trial {duplicated!r} appears more than once")
    records = named_combined(records)
    frame = plain_frame(combine_ranks(records) if is_run(records) else records)
    frame["status"] = frame["status"].str.lower()
    return records, frame


def named_combined(records: Sequence[Record]) -> list[Record]:
    """A sweep's `combined` trial (the baseline with each swept key at its best value) renamed as
    the sweep names that config in any other trial (predict.names_of: what differs from the
    baseline): files are aligned by trial, and `combined` is another config in each file. Kept as
    it is where the file has no baseline, or another row already has that name."""
    name = names_of(records)
    if name.baseline is None:
        return list(records)
    taken = {r.trial for r in records}
    out = []
    for r in records:
        if r.trial == COMBINED and not r.watched and r.settings.num_workers is not None:
            config = config_name(settings_of(r), name.baseline, order=name.order)
            if config not in taken:
                r = r.with_columns(trial=config)
        out.append(r)
    return out


def load_results(paths: Iterable[Path | str]) -> list[ResultSet]:
    """Read each CSV (ResultsError naming the file when unreadable or missing columns)."""
    files = [Path(p) for p in paths]
    read = [_read(p) for p in files]
    return [ResultSet(p, label, frame, tuple(records))
            for p, label, (records, frame) in zip(files, _labels(files), read)]


# --- statistics ------------------------------------------------------------------------------


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Kendall's tau-b of two paired samples, ties allowed (x tied, y tied, or both).

    tau_b = (C - D) / sqrt((n0 - n1) (n0 - n2)), n0 = n(n-1)/2 pairs, n1 / n2 the pairs tied in
    x / in y. None with fewer than two pairs or when one side is all ties (undefined).
    """
    a = np.asarray(x, dtype=float)
    b = np.asarray(y, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"kendall_tau_b needs two 1-d samples of one length, got {a.shape} and {b.shape}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("kendall_tau_b: samples must be finite numbers")
    n = a.size
    if n < 2:
        return None
    upper = np.triu_indices(n, k=1)
    sign_a = np.sign(a[:, None] - a[None, :])[upper]
    sign_b = np.sign(b[:, None] - b[None, :])[upper]
    pairs = n * (n - 1) // 2
    tied_a = int(np.count_nonzero(sign_a == 0))
    tied_b = int(np.count_nonzero(sign_b == 0))
    denominator = math.sqrt((pairs - tied_a) * (pairs - tied_b))
    if denominator == 0:
        return None
    return float(np.sum(sign_a * sign_b) / denominator)


# --- comparing ----------------------------------------------------------------------------


def _value(frame: pd.DataFrame, column: str) -> FileValue:
    """A file-level column's value: None when empty; several distinct values joined by ','."""
    values: list[FileValue] = [v for v in dict.fromkeys(frame[column])
                               if v != "" and not (isinstance(v, float) and math.isnan(v))] if column in frame else []
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return ",".join(str(v) for v in values)


def _check_same_config(results: Sequence[ResultSet]) -> None:
    first = results[0]
    for other in results[1:]:
        differing = [(c, _value(first.frame, c), _value(other.frame, c)) for c in CONFIG_COLUMNS]
        # An empty value (no rows, an older CSV) cannot be checked and is not a difference.
        differing = [d for d in differing if d[1] is not None and d[2] is not None and d[1] != d[2]]
        if differing:
            what = ", ".join(f"{c} {a!r} vs {b!r}" for c, a, b in differing)
            raise ResultsError(f"{first.path} and {other.path} come from different configs ({what}); "
                               "use --force to compare them anyway")


def _ranked(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[(frame["status"] == Status.OK) & frame["rank"].notna()]


def winner_of(frame: pd.DataFrame) -> str | None:
    """The rank-1 trial with the highest throughput (first in the file on equal throughput)."""
    top = _ranked(frame)
    top = top[top["rank"] == top["rank"].min()] if not top.empty else top
    if top.empty:
        return None
    best = top["throughput"].fillna(-math.inf)
    return str(top.loc[best.idxmax(), "trial"])


def _boolean(value: object) -> bool | None:
    """A tied_with_best cell as True / False, None when empty (a file written before the column):
    a column that holds no empty cell reads as numpy's booleans."""
    return bool(value) if isinstance(value, (bool, np.bool_)) else None


def _tied(frame: pd.DataFrame, trial: str | None) -> bool:
    """Whether `trial` ran and is marked tied_with_best in this file."""
    rows = frame[(frame["trial"] == trial) & (frame["status"] == Status.OK)]
    return not rows.empty and _boolean(rows["tied_with_best"].iloc[0]) is True


def _speedup_sides(frame: pd.DataFrame) -> dict[str, int]:
    """trial -> +1 (helps: throughput_lo / baseline > 1), -1 (hurts: throughput_hi / baseline < 1);
    trials whose speedup interval holds 1, or cannot be told, are left out."""
    base = frame[(frame["trial"] == BASELINE) & (frame["status"] == Status.OK)]["throughput"]
    if base.empty or not (base.iloc[0] > 0):
        return {}
    baseline = float(base.iloc[0])
    sides = {}
    for row in frame[frame["status"] == Status.OK].itertuples(index=False):
        if row.throughput_lo / baseline > 1:
            sides[row.trial] = 1
        elif row.throughput_hi / baseline < 1:
            sides[row.trial] = -1
    return sides


def _aligned(results: Sequence[ResultSet], trials: Sequence[str]) -> pd.DataFrame:
    table = pd.DataFrame({"trial": list(trials)})
    for result in results:
        rows = result.frame.set_index("trial").reindex(trials)
        for column in PER_FILE_COLUMNS:
            name = f"{column}{LABEL_SEPARATOR}{result.label}"
            values = rows[column].to_numpy()
            if column == "status":
                values = [ABSENT if pd.isna(v) else v for v in values]
            elif column == "reason":
                values = ["" if pd.isna(v) else v for v in values]
            elif column == "tied_with_best":
                values = [_boolean(v) for v in values]
            table[name] = values
        rank = f"rank{LABEL_SEPARATOR}{result.label}"
        table[rank] = table[rank].astype("Int64")
    return table


def _trial_order(results: Sequence[ResultSet]) -> list[str]:
    """The first file's order (best first), then trials only later files have, in their order."""
    return list(dict.fromkeys(t for r in results for t in r.frame["trial"]))


def compare(results: Sequence[ResultSet], force: bool = False) -> Comparison:
    """Align the files by trial and say whether the first file's conclusion holds in the others.

    Files of different configs (config_name or config_sha) are refused unless `force`.
    `changed` is true when a file's winner is not the first file's winner (unless each of the
    two winners is marked tied_with_best in the other's file: a swap within noise, the same
    conclusion; a file without that column cannot tell a swap from a flip), when a trial helps
    beyond its interval in one file and hurts beyond it in another, or when a file has no
    ranked trial while the first has one. Where a file never measured the other's winner (no
    row, skipped, only predicted), nothing is changed: the verdict says `cannot tell: LABEL did
    not measure TRIAL`. Tie-group and status changes are flagged only.

    Files of a real run (watched rows) rank nothing: the conclusion is the sweeps' (the first
    sweep is the reference), and each run is set against the first sweep (comparison.checks.run_checks).
    A run is never refused as another config: a script is no sweep config.
    """
    results = list(results)
    if len(results) < 2:
        raise ResultsError(f"compare needs at least two results CSVs, got {len(results)}")
    sweeps = [r for r in results if not r.run]
    if not force and len(sweeps) > 1:
        _check_same_config(sweeps)
    trials = _trial_order(results)
    table = _aligned(results, trials)
    # Each trial's flags, in the order the checks run.
    flags: dict[str, list[str]] = {t: [] for t in trials}
    conclusion = _conclude(results, sweeps, table, flags)
    checked = Checked(_transfers(sweeps) if len(sweeps) > 1 else {},
                      _run_checks(sweeps[0], [r for r in results if r.run]) if sweeps else {})
    _add_checks(table, checked, trials)
    table[FLAGS_COLUMN] = [FLAG_SEPARATOR.join(flags[t]) for t in trials]  # last
    files = Files(tuple(r.label for r in results), tuple(r.path for r in results),
                  tuple(r.label for r in results if r.run), _differences(results))
    return Comparison(files, table, conclusion, checked)


def _conclude(results: Sequence[ResultSet], sweeps: Sequence[ResultSet], table: pd.DataFrame,
              flags: dict[str, list[str]]) -> Conclusion:
    """The sweeps' conclusion: each file's winner, and each trial's flags (added to `flags`) with
    the reasons the conclusion changed; with no sweep, the runs' status flags alone."""
    trials = list(flags)
    winners = {r.label: winner_of(r.frame) for r in results}
    reasons: list[str] = []
    unknown: list[str] = []
    tied: list[str] = []
    if sweeps:
        _flag_winners(sweeps, winners, flags, reasons, (unknown, tied))
        _flag_sides(sweeps, trials, flags, reasons)
    _flag_statuses(table, [r.label for r in (sweeps or results)], trials, flags)
    return Conclusion(winners, _taus(sweeps), {t: f for t, f in flags.items() if f},
                      _verdict(reasons, unknown, tied), bool(reasons), tuple(unknown), tuple(tied))


def _add_checks(table: pd.DataFrame, checked: Checked, trials: Sequence[str]) -> None:
    """The checks' columns: per later sweep what the first file's model predicted for each trial
    there, per run what the first sweep said of each watched loader's config."""
    for label, check in checked.transfers.items():
        table[f"{TRANSFER_COLUMN}{LABEL_SEPARATOR}{label}"] = [check.predicted.get(t) for t in trials]
    for label, checks in checked.runs.items():
        by_trial = {c.trial: c for c in checks}
        for column, attribute in RUN_COLUMNS.items():
            table[f"{column}{LABEL_SEPARATOR}{label}"] = [getattr(by_trial[t], attribute) if t in by_trial else None
                                                          for t in trials]


def _verdict(reasons: Sequence[str], unknown: Sequence[str], tied: Sequence[str] = ()) -> str:
    """`conclusion changed: …` (with what cannot be told beside it), else `cannot tell: …` where a
    file did not measure the other's winner, else `same conclusion: the winners were tied in both
    (…)` where a winner differs within the tie, else `conclusion holds`."""
    cannot = f"{VERDICT_CANNOT_TELL}: {FLAG_SEPARATOR.join(unknown)}" if unknown else ""
    if reasons:
        return f"{VERDICT_CHANGED}: {FLAG_SEPARATOR.join(reasons)}" + (f"{FLAG_SEPARATOR}{cannot}" if cannot else "")
    if cannot:
        return cannot
    return f"{VERDICT_TIED} ({FLAG_SEPARATOR.join(tied)})" if tied else VERDICT_HOLDS


def _run_checks(sweep: ResultSet, runs: Sequence[ResultSet]) -> dict[str, tuple[RunCheck, ...]]:
    """Each run against the sweep: what it said of each watched loader's config."""
    modelled = not missing_columns(sweep.path, MODEL_COLUMNS)
    return {run.label: tuple(run_checks(sweep.records, run.records, modelled=modelled)) for run in runs}


def _differences(results: Sequence[ResultSet]) -> dict[str, dict[str, FileValue]]:
    """Each of DIFFERENCE_COLUMNS whose value is not the same in every file, by file."""
    differences: dict[str, dict[str, FileValue]] = {}
    for column in DIFFERENCE_COLUMNS:
        values = {r.label: _value(r.frame, column) for r in results}
        if len(set(map(repr, values.values()))) > 1:
            differences[column] = values
    return differences


def _taus(results: Sequence[ResultSet]) -> dict[str, float | None]:
    """Kendall's tau-b of each file's ranking against the first's, over the trials both ranked
    (a run ranks nothing: none)."""
    if not results:
        return {}
    first_ranks = _ranked(results[0].frame).set_index("trial")["rank"]
    tau: dict[str, float | None] = {}
    for result in results:
        ranks = _ranked(result.frame).set_index("trial")["rank"]
        common = [t for t in first_ranks.index if t in ranks.index]
        tau[result.label] = kendall_tau_b(first_ranks[common].to_numpy(), ranks[common].to_numpy())
    return tau


def _tried(frame: pd.DataFrame, trial: str | None) -> bool:
    """Whether the file measured `trial`, or tried to (it failed or timed out there)."""
    return bool(frame.loc[frame["trial"] == trial, "status"].isin(TRIED_STATUSES).any())


def _flag_winners(results: Sequence[ResultSet], winners: Mapping[str, str | None],
                  flags: dict[str, list[str]], reasons: list[str], said: tuple[list[str], list[str]]) -> None:
    """Flag each later file's winner where it is not the first file's, and say why that changes
    the conclusion, unless one file never measured the other's winner (`said[0]`: that cannot be
    told), or each winner is marked tied_with_best in the other's file, so that the two were
    tied with the best in both files (`said[1]`: the same conclusion)."""
    unknown, tied = said
    first = results[0]
    first_winner = winners[first.label]
    for result in results[1:]:
        new = winners[result.label]
        if new is None and first_winner is not None:
            reasons.append(f"no trial ran in {result.label}")
            continue
        if new is None or new == first_winner:
            continue
        missing = [(file, winner) for file, winner in ((result, first_winner), (first, new))
                   if winner is not None and not _tried(file.frame, winner)]
        if missing:
            for file, winner in missing:
                if WINNER_NOT_MEASURED not in flags[winner]:
                    flags[winner].append(WINNER_NOT_MEASURED)
                unknown.append(f"{file.label} did not measure {winner}")
        elif _tied(first.frame, new) and _tied(result.frame, first_winner):
            if WINNER_WITHIN_NOISE not in flags[new]:
                flags[new].append(WINNER_WITHIN_NOISE)
            tied.append(f"{first_winner} in {first.label}, {new} in {result.label}")
        else:
            if WINNER_CHANGED not in flags[new]:
                flags[new].append(WINNER_CHANGED)
            reasons.append(f"winner is {new} in {result.label} but "
                           f"{first_winner if first_winner is not None else 'none'} in {first.label}")


def _flag_sides(results: Sequence[ResultSet], trials: Sequence[str],
                flags: dict[str, list[str]], reasons: list[str]) -> None:
    """Flag (and give as a reason) each trial that helps beyond its interval in one file and
    hurts beyond it in another."""
    sides = [_speedup_sides(r.frame) for r in results]
    for trial in trials:
        seen = [(r.label, s[trial]) for r, s in zip(results, sides) if trial in s]
        if len({side for _, side in seen}) <= 1:
            continue
        start_label, start = seen[0]
        end_label = next(label for label, side in seen if side != start)
        if start > 0:
            flags[trial].append(HELPS_TO_HURTS)
            reasons.append(f"{trial} helps in {start_label} but hurts in {end_label}")
        else:
            flags[trial].append(HURTS_TO_HELPS)
            reasons.append(f"{trial} hurts in {start_label} but helps in {end_label}")


def _flag_statuses(table: pd.DataFrame, labels: Sequence[str], trials: Sequence[str],
                   flags: dict[str, list[str]]) -> None:
    """Flag (only) each trial whose status, or tie with the best among the files it ran in, differs."""
    for i, trial in enumerate(trials):
        # A config one file measured and another only predicted has not changed its status.
        statuses = {table.at[i, f"status{LABEL_SEPARATOR}{label}"] for label in labels} - {Status.PREDICTED}
        if len(statuses) > 1:
            flags[trial].append(STATUS_CHANGED)
        ties = {table.at[i, f"tied_with_best{LABEL_SEPARATOR}{label}"] for label in labels
                if table.at[i, f"status{LABEL_SEPARATOR}{label}"] == Status.OK}
        ties.discard(None)
        if len(ties) > 1:
            flags[trial].append(TIE_GROUP_CHANGED)


def _transfers(results: Sequence[ResultSet]) -> dict[str, TransferCheck]:
    """For each file after the first measured on another machine (cores, ranks, step): what the
    first file's model predicted for it (see comparison.checks.transfer_check)."""
    if missing_columns(results[0].path, MODEL_COLUMNS):
        return {}  # written before the model's evidence: nothing to fit
    out = {}
    for result in results[1:]:
        check = transfer_check(results[0].records, result.records)
        if check is not None:
            out[result.label] = check
    return out
