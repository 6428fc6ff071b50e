"""Charts of results CSVs (docs/reference.md, "The CSV"): throughput with its interval and the wait ratio per trial.

Drawn with matplotlib's Agg canvas on a Figure of its own, never through pyplot, so the
user's global backend and pyplot state are left alone. Returns the file written; printing
is the CLI's job.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence, TypeGuard

import pandas as pd

from loadtune.asked.trials import BASELINE, IDEAL
from loadtune.core.errors import LoadtuneError, ResultsError
from loadtune.core.kinds import Status
from loadtune.core.text import short
from loadtune.record.record import MEASURED_STATUSES, load_records, plain_frame

if TYPE_CHECKING:
    from matplotlib.artist import Artist
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

META = ("config_name", "scale", "host", "device")

DPI = 100
MIN_WIDTH_IN, MAX_WIDTH_IN = 10.0, 16.0
WIDTH_PER_CSV_IN = 7.5
ROW_HEIGHT_IN = 0.36
BASE_HEIGHT_IN = 2.3
MAX_HEIGHT_IN = 40.0
REASON_CHARS = 90

BEST_COLOR = "#2f9e44"
BASELINE_COLOR = "#4c6ef5"
OTHER_COLOR = "#74a9cf"
WAIT_COLOR = "#f08c00"
GREY = "#9a9a9a"
GREY_FILL = "#ececec"
IDEAL_COLOR = "#c92a2a"
PREDICTED_COLOR = "#212529"
LEGEND_COLUMNS = 4  # handles per legend row: more would run off a narrow figure
WAIT_LABEL_OUTSIDE_BELOW = 0.85
LABEL_BOX = {"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 0.6}

Row = dict[str, Any]  # a row of a plain frame, by column


# --------------------------------------------------------------------------- reading


def read_results_csv(path: Path | str) -> pd.DataFrame:
    """A results CSV through the one reader, as a plain frame (see record.plain_frame).

    Raises ResultsError naming the file when it is missing, unreadable, empty or lacks a
    column a chart needs.
    """
    return plain_frame(load_records(path))


# --------------------------------------------------------------------------- helpers


def _num(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def _text(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return str(value)


def _meta_value(df: pd.DataFrame, col: str) -> str:
    if col not in df.columns:
        return ""
    values = [_text(v) for v in df[col] if _text(v)]
    if not values:
        return ""
    value = values[0]
    if col == "scale":
        number = _num(value)
        if number is not None:
            value = f"x{number:g}"
    return value


def trial_order(frames: Sequence[tuple[str, pd.DataFrame]]) -> list[str]:
    """Trials top to bottom: the first CSV's ranking (best first, rows that did not run last),
    then trials only the other CSVs have, in their order. The `ideal` row is not a trial, nor are
    configs the model only predicted (status predicted: the CSV holds them)."""
    order: list[str] = []
    for i, (_, df) in enumerate(frames):
        rows = df[df["trial"] != IDEAL]
        if "status" in rows.columns:
            rows = rows[rows["status"] != Status.PREDICTED]
        if i == 0 and "rank" in rows.columns:
            rows = rows.assign(_pos=range(len(rows)))
            rows = rows.sort_values(["rank", "_pos"], na_position="last", kind="stable")
        for name in rows["trial"]:
            if name not in order:
                order.append(name)
    return order


def _rows_by_trial(df: pd.DataFrame) -> dict[str, Row]:
    out: dict[str, Row] = {}
    for row in df.to_dict("records"):
        out.setdefault(_text(row.get("trial")), row)
    return out


def _is_ok(row: Row | None, key: str = "throughput") -> TypeGuard[Row]:
    return row is not None and _text(row.get("status")) in MEASURED_STATUSES and _num(row.get(key)) is not None


def _measured(row: Row, key: str) -> float:
    """A row's figure where _is_ok found one (0.0 where there is none)."""
    return _num(row.get(key)) or 0.0


def _bar_color(row: Row) -> str:
    if _num(row.get("rank")) == 1 or _text(row.get("tied_with_best")).lower() == "true" \
            or row.get("tied_with_best") is True:
        return BEST_COLOR
    if row.get("trial") == BASELINE:
        return BASELINE_COLOR
    return OTHER_COLOR


def _errors(rows: list[Row], key: str) -> tuple[list[float], list[float]]:
    below, above = [], []
    for row in rows:
        mean = _measured(row, key)
        lo, hi = _num(row.get(f"{key}_lo")), _num(row.get(f"{key}_hi"))
        below.append(max(0.0, mean - lo) if lo is not None else 0.0)
        above.append(max(0.0, hi - mean) if hi is not None else 0.0)
    return below, above


# --------------------------------------------------------------------------- drawing


def _figure_size(n_frames: int, n_trials: int) -> tuple[float, float]:
    width = min(MAX_WIDTH_IN, max(MIN_WIDTH_IN, WIDTH_PER_CSV_IN * n_frames))
    height = min(MAX_HEIGHT_IN, BASE_HEIGHT_IN + ROW_HEIGHT_IN * max(n_trials, 3))
    return width, height


def _titles(frames: Sequence[tuple[str, pd.DataFrame]]) -> tuple[str, list[str]]:
    """The figure title (what all CSVs share) and each column's title (label and what differs)."""
    metas = [{c: _meta_value(df, c) for c in META} for _, df in frames]
    shared = [c for c in META if len({m[c] for m in metas}) == 1 and metas[0][c]]

    def describe(meta: dict[str, str], cols: Sequence[str]) -> str:
        parts = []
        for c in cols:
            if not meta[c]:
                continue
            if c == "host":
                parts.append(f"on {meta[c]}")
            elif c == "device":
                parts.append(f"device {meta[c]}")
            else:
                parts.append(meta[c])
        return " · ".join(parts)

    title = "loadtune"
    if shared:
        title += ": " + describe(metas[0], shared)
    columns = []
    for (label, _), meta in zip(frames, metas):
        differing = describe(meta, [c for c in META if c not in shared])
        columns.append(f"{label}\n{differing}" if differing else label)
    return title, columns


def _throughput_right(rows: dict[str, Row], n_frames: int) -> float:
    """Where a throughput axis must end to show every bar, interval, line and label of a CSV
    (narrower panels, with more CSVs side by side, need more room for the value labels)."""
    ends = [1.0]
    for row in rows.values():
        if _is_ok(row):
            ends.append(max(_measured(row, "throughput"), _num(row.get("throughput_hi")) or 0.0,
                            _num(row.get("predicted_throughput")) or 0.0))
    return max(ends) * (1.22 if n_frames == 1 else 1.3 if n_frames == 2 else 1.45)


def _draw_throughput(ax: Axes, order: list[str], rows: dict[str, Row], ideal: Row | None, right: float) -> None:
    ok = [(i, rows[name]) for i, name in enumerate(order) if _is_ok(rows.get(name))]
    ys = [i for i, _ in ok]
    data = [r for _, r in ok]
    values = [_measured(r, "throughput") for r in data]
    below, above = _errors(data, "throughput")
    if ok:
        ax.barh(ys, values, xerr=[below, above], color=[_bar_color(r) for r in data], height=0.62,
                error_kw={"ecolor": "#333333", "elinewidth": 1.1, "capsize": 3}, zorder=2)
    highs = [v + a for v, a in zip(values, above)]
    predicted = [(y, p) for y, r in zip(ys, data) if (p := _num(r.get("predicted_throughput"))) is not None]
    if predicted:  # what the model said before the trial ran
        ax.scatter([p for _, p in predicted], [y for y, _ in predicted], marker="D", s=22, color=PREDICTED_COLOR,
                   zorder=4, linewidths=0)
        at = dict(predicted)
        highs = [max(high, at.get(y, 0.0)) for high, y in zip(highs, ys)]  # labels clear the marker
    ax.set_xlim(0, right)

    for y, value, top, r in zip(ys, values, highs, data):
        speedup = _num(r.get("speedup"))
        label = f"{value:,.0f}"
        if speedup is not None and r["trial"] != BASELINE:
            label += f"  ({speedup:.2f}x)"
        ax.text(top + right * 0.01, y, label, va="center", ha="left", fontsize=8, color="#222222",
                clip_on=True, zorder=3, bbox=LABEL_BOX)

    _draw_not_run(ax, order, rows)
    base = rows.get(BASELINE)
    _draw_references(ax, _num(base["throughput"]) if _is_ok(base) else None,
                     _num(ideal["throughput"]) if _is_ok(ideal) else None)
    ax.set_xlabel("throughput, samples/s (bars: 95% interval)")
    ax.grid(axis="x", color="#dddddd", lw=0.6, zorder=0)


def _draw_not_run(ax: Axes, order: list[str], rows: dict[str, Row]) -> None:
    """Rows that did not run (or are missing from this CSV): greyed, with their reason."""
    from matplotlib.transforms import blended_transform_factory

    to_axes_x = blended_transform_factory(ax.transAxes, ax.transData)
    for i, name in enumerate(order):
        row = rows.get(name)
        if _is_ok(row):
            continue
        if row is None:
            message = "not in this CSV"
        else:
            status = _text(row.get("status")) or "no result"
            reason = _text(row.get("reason"))
            message = f"{status}: {short(reason, REASON_CHARS, '…')}" if reason else status
        ax.axhspan(i - 0.31, i + 0.31, color=GREY_FILL, zorder=1, lw=0)
        ax.text(0.01, i, message, transform=to_axes_x, va="center", ha="left", fontsize=7.5,
                color="#777777", style="italic", clip_on=True, zorder=5,
                bbox={**LABEL_BOX, "facecolor": GREY_FILL, "alpha": 1.0})


def _draw_references(ax: Axes, base_value: float | None, ideal_value: float | None) -> None:
    """The baseline's throughput and the ideal's, as vertical lines across the trials."""
    from matplotlib.transforms import blended_transform_factory

    if base_value is not None:
        ax.axvline(base_value, color=BASELINE_COLOR, ls="--", lw=1.2, zorder=2.5)
    if ideal_value is not None:
        ax.axvline(ideal_value, color=IDEAL_COLOR, ls=":", lw=1.6, zorder=2.5)
        ax.text(ideal_value, 0.99, f"ideal {ideal_value:,.0f}/s ", transform=blended_transform_factory(
            ax.transData, ax.transAxes), rotation=90, va="top", ha="right", fontsize=7.5,
            color=IDEAL_COLOR, zorder=5)


def _draw_wait(ax: Axes, order: list[str], rows: dict[str, Row], ideal: Row | None) -> None:
    ok = [(i, rows[name]) for i, name in enumerate(order) if _is_ok(rows.get(name), "wait_ratio")]
    ys = [i for i, _ in ok]
    data = [r for _, r in ok]
    values = [_measured(r, "wait_ratio") for r in data]
    below, above = _errors(data, "wait_ratio")
    if ok:
        ax.barh(ys, values, xerr=[below, above], color=WAIT_COLOR, height=0.62,
                error_kw={"ecolor": "#333333", "elinewidth": 1.1, "capsize": 3}, zorder=2)
    for y, value, less, extra in zip(ys, values, below, above):
        if value + extra <= WAIT_LABEL_OUTSIDE_BELOW:
            ax.text(value + extra + 0.015, y, f"{value:.2f}", va="center", ha="left", fontsize=8,
                    color="#222222", clip_on=True, zorder=3, bbox=LABEL_BOX)
        else:  # no room right of the bar: write it inside, left of the interval
            ax.text(max(value - less - 0.02, 0.02), y, f"{value:.2f}", va="center", ha="right",
                    fontsize=8, color="white", fontweight="bold", clip_on=True, zorder=3)
    for i, name in enumerate(order):
        if not _is_ok(rows.get(name), "wait_ratio"):
            ax.axhspan(i - 0.31, i + 0.31, color=GREY_FILL, zorder=1, lw=0)
    ideal_value = _num(ideal["wait_ratio"]) if _is_ok(ideal, "wait_ratio") else None
    if ideal_value is not None:
        ax.axvline(ideal_value, color=IDEAL_COLOR, ls=":", lw=1.6, zorder=4)
    ax.set_xlim(0, 1.15)
    ax.set_xticks([0, 0.25, 0.5, 0.75, 1.0])
    ax.set_xlabel("wait ratio (lower is better)")
    ax.grid(axis="x", color="#dddddd", lw=0.6, zorder=0)


def _legend_handles(frames: Sequence[tuple[str, pd.DataFrame]]) -> list[Artist]:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [Patch(color=BEST_COLOR, label="best / tied with best"),
               Patch(color=BASELINE_COLOR, label="baseline"),
               Patch(color=OTHER_COLOR, label="other trial"),
               Line2D([], [], color=BASELINE_COLOR, ls="--", label="baseline throughput")]
    if any("predicted_throughput" in df.columns and df["predicted_throughput"].notna().any() for _, df in frames):
        handles.append(Line2D([], [], color=PREDICTED_COLOR, marker="D", ls="", markersize=5,
                              label="predicted before it ran"))
    if any((df["trial"] == IDEAL).any() for _, df in frames):
        handles.append(Line2D([], [], color=IDEAL_COLOR, ls=":", label="ideal: the step fed from memory"))
    handles.append(Patch(color=GREY_FILL, label="did not run (reason in grey)"))
    return handles


def make_figure(frames: Sequence[tuple[str, pd.DataFrame]]) -> Figure:
    """The chart as a matplotlib Figure (with an Agg canvas), one column of panels per CSV."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    order = _drawable_order(frames)
    n = len(frames)
    fig = Figure(figsize=_figure_size(n, len(order)), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 2 * n, sharey=True, squeeze=False,
                        gridspec_kw={"width_ratios": [3.0, 1.25] * n})[0]
    title, column_titles = _titles(frames)
    fig.suptitle(title, fontsize=12, fontweight="bold")

    all_rows = [_rows_by_trial(df) for _, df in frames]
    right = max(_throughput_right(rows, n) for rows in all_rows)  # one scale, so CSVs compare by eye
    for k, ((label, df), rows) in enumerate(zip(frames, all_rows)):
        ideal = rows.get(IDEAL)
        t_ax, w_ax = axes[2 * k], axes[2 * k + 1]
        _draw_throughput(t_ax, order, rows, ideal, right)
        _draw_wait(w_ax, order, rows, ideal)
        if n > 2:  # narrow panels: fewer ticks, shorter labels
            t_ax.xaxis.set_major_locator(MaxNLocator(nbins=4))
            t_ax.set_xlabel("samples/s (95% interval)")
            w_ax.set_xticks([0, 0.5, 1.0])
            w_ax.set_xlabel("wait ratio")
        t_ax.set_title(column_titles[k], fontsize=10, loc="left")
        w_ax.tick_params(axis="y", left=False)
        if k > 0:
            t_ax.tick_params(axis="y", left=False)

    handles = _legend_handles(frames)
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), LEGEND_COLUMNS),
               fontsize=8, frameon=False)
    _label_trials(axes[0], order, _rows_by_trial(frames[0][1]))
    return fig


def _drawable_order(frames: Sequence[tuple[str, pd.DataFrame]]) -> list[str]:
    """The trials to draw, top to bottom; ResultsError when there is nothing a chart can show."""
    if not frames:
        raise ResultsError("nothing to draw: give at least one results CSV")
    for label, df in frames:
        missing = [c for c in ("trial", "status", "throughput", "wait_ratio") if c not in df.columns]
        if missing:
            raise ResultsError(f"{label}: not a loadtune results table: missing column(s) {', '.join(missing)}")
    order = trial_order(frames)
    if not order:
        raise ResultsError(f"{frames[0][0]}: no trials to draw")
    return order


def _label_trials(first: Axes, order: list[str], first_rows: dict[str, Row]) -> None:
    """The trials' names down the first panel: greyed where the first CSV did not run them, the
    best in bold, the best at the top."""
    first.set_yticks(range(len(order)))
    first.set_yticklabels(order, fontsize=8.5)
    for tick, name in zip(first.get_yticklabels(), order):
        row = first_rows.get(name)
        if not _is_ok(row):
            tick.set_color(GREY)
        elif _num(row.get("rank")) == 1:
            tick.set_fontweight("bold")
    first.set_ylim(len(order) - 0.5, -0.5)


def draw_results(frames: Sequence[tuple[str, pd.DataFrame]], path: Path | str) -> Path:
    """Draw one or more results tables (label, DataFrame) side by side and write the image.

    The format follows the file's suffix when matplotlib knows it, else PNG. Returns the path.
    """
    path = Path(path)
    fig = make_figure(frames)
    supported = fig.canvas.get_supported_filetypes()
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in supported:
        fmt = "png"
    try:
        if path.parent and not path.parent.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, format=fmt, dpi=DPI)
    except OSError as exc:
        raise LoadtuneError(f"{path}: cannot write the chart: {exc.strerror or exc}") from None
    return path


def draw_csvs(paths: Sequence[Path | str], out: Path | str) -> Path:
    """Read results CSVs and draw them side by side, each labelled by its file name."""
    frames = [(Path(p).name, read_results_csv(p)) for p in paths]
    return draw_results(frames, out)
