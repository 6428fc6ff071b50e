"""The command line: the only module that prints or exits."""

from __future__ import annotations

import dataclasses
import json
import math
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, NoReturn, Optional

import typer
from rich.console import Console, RenderableType
from rich.text import Text

from loadtune.core.errors import LoadtuneError
from loadtune.core.text import output_width, wrap
from loadtune.core.version import __version__

if TYPE_CHECKING:
    from loadtune.asked.options import SweepOptions
    from loadtune.present.sweep import SweepResult
    from loadtune.present.view import Shown
    from loadtune.progress import SweepView
from loadtune.core.kinds import RankBy, Strategy

EXIT_USER_ERROR = 1
EXIT_FLIPPED = 3
EXIT_INTERRUPTED = 130

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # Plain help: rich's panels show a flag as taking a value (`--verbose <bool>`); click's own
    # layout shows it as the flag it is.
    rich_markup_mode=None,
    help="Measure which DataLoader settings keep your accelerator fed.",
)


def _width(stream: Any) -> int | None:
    """The output's width (text.output_width): COLUMNS when set, the terminal's, else DEFAULT_WIDTH."""
    return output_width(stream)


def _console(stderr: bool = False) -> Console:
    return Console(stderr=stderr, width=_width(sys.stderr if stderr else sys.stdout))


def _err() -> Console:
    """stderr, at its width now."""
    return _console(stderr=True)


def _say(console: Console, text: str, label: str = "", label_style: str = "", style: str = "",
         one_line: bool = False) -> None:
    """One item of prose, wrapped at the console's width (text.wrap: broken at spaces, continuation
    lines indented), or with `one_line` on one line whatever its length; `label`, where the item
    starts with it, drawn in `label_style`."""
    for number, line in enumerate(wrap(text, None if one_line else console.width)):
        shown = Text(line, style=style)
        if number == 0 and label and line.lstrip().startswith(label):
            start = len(line) - len(line.lstrip())
            shown.stylize(label_style, start, start + len(label))
        console.print(shown, highlight=False, soft_wrap=True)


def _say_lines(console: Console, lines: Iterable[str], style: str = "") -> None:
    for line in lines:
        _say(console, line, style=style)


def _warn(console: Console, text: str) -> None:
    _say(console, f"Warning: {text}", "Warning:", "yellow")


def _table(console: Console, table: RenderableType) -> None:
    """A table, never cut: where even its essential columns do not fit, its rows run past the width."""
    console.print(table, crop=False)


def _show(console: Console, shown: Iterable["Shown"]) -> None:
    """A command's output in order: tables (never cut), prose and warnings."""
    from loadtune.present.view import Prose, Warned

    for piece in shown:
        if isinstance(piece, Prose):
            _say_lines(console, piece.lines, style=piece.style)
        elif isinstance(piece, Warned):
            _warn(console, piece.text)
        else:
            _table(console, piece)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"loadtune {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", is_eager=True, callback=_version,
                                 help="Print the version and exit."),
) -> None:
    """Measure which DataLoader settings keep your accelerator fed."""


def _fail(message: str, debug: bool) -> NoReturn:
    err = _err()
    if debug:
        err.print_exception()
    # One line, however long, for scripts that read the last line (a terminal wraps it).
    _say(err, f"Error: {message}", "Error:", "bold red", one_line=True)
    raise typer.Exit(EXIT_USER_ERROR)


def _refuse_existing(path: Path | None, overwrite: bool, keep: str = "") -> None:
    """An existing results file is never replaced unasked: a one-line error naming it and the
    flags that allow it."""
    if path is not None and path.exists() and not overwrite:
        raise LoadtuneError(f"{path} already exists: add {keep}--overwrite to replace it")


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


@app.command()
def sweep(
    config: Path = typer.Argument(..., help="YAML config (see `loadtune init`)."),
    out: Optional[Path] = typer.Option(None, "--out", help="CSV to write (default: config `output`, "
                                       "else results/<name>-<host>-x<scale>.csv)."),
    scale: float = typer.Option(1.0, "--scale", help="Multiply the dataset kwarg named by dataset.scale_kwarg."),
    sets: list[str] = typer.Option([], "--set", help="Override a config key: KEY=VALUE (VALUE is YAML)."),
    repeats: Optional[int] = typer.Option(None, "--repeats", help="Shorthand for measure.repeats."),
    batches: Optional[int] = typer.Option(None, "--batches", help="Shorthand for measure.batches."),
    warmup: Optional[int] = typer.Option(None, "--warmup", help="Shorthand for measure.warmup_batches."),
    tolerance: Optional[float] = typer.Option(None, "--tolerance", help="Shorthand for measure.tolerance: "
                                              "trials within this share of the best's throughput are tied "
                                              "(default 0.03)."),
    budget: Optional[float] = typer.Option(None, "--budget", help="Shorthand for measure.budget_s: seconds "
                                           "after which racing adds no more repeats."),
    device: Optional[str] = typer.Option(None, "--device", help="auto, cpu, cuda or cuda:I."),
    strategy: Strategy = typer.Option(Strategy.MODEL, "--strategy", help="model (one change at a time, then "
                                      "only what the fitted pipeline model cannot rule out; the default), ofat "
                                      "(one change at a time from the baseline), greedy (coordinate descent) or "
                                      "grid (every combination)."),
    rank_by: RankBy = typer.Option(RankBy.THROUGHPUT, "--rank-by", help="throughput or wait_ratio."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Also draw the result as a chart (PNG)."),
    resume: bool = typer.Option(False, "--resume", help="Keep the rows already in the output CSV that belong "
                                "to this config and machine; run only the rest."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace the output CSV where it exists (without "
                                   "this or --resume, an existing one is refused)."),
    ranks: int = typer.Option(1, "--ranks", min=1, help="Run N data-parallel ranks at once through "
                              "torch.distributed, each with its own DataLoader (default 1)."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON on stdout."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Also show the notes, each bottleneck, the "
                                 "data check, the model and the trials that did not run."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    """Measure each one-at-a-time change of the DataLoader settings and write a ranked CSV."""
    from loadtune import progress
    from loadtune.asked.options import MeasureShorthands, OutputOptions, SweepOptions

    started_s = progress.CLOCK()

    if resume and overwrite:
        raise typer.BadParameter("--resume keeps the output's rows and --overwrite replaces them: give one",
                                 param_hint="--overwrite")
    options = SweepOptions(config, tuple(sets), scale=scale,
                           measure=MeasureShorthands(repeats=repeats, batches=batches, warmup=warmup,
                                                     tolerance=tolerance, budget=budget, device=device),
                           strategy=strategy, rank_by=rank_by, ranks=ranks,
                           output=OutputOptions(out=out, resume=resume, overwrite=overwrite))
    result = _run_sweep(options, debug)
    if result is not None:  # None: a torchrun follower, which prints nothing
        _print_sweep(result, plot, as_json, verbose, debug, started_s)


def _sweep_view(err: Console) -> "SweepView":
    """The sweep's progress view on stderr; its bar only for a person watching a terminal (stdout
    and stderr both one): a pipe or a log gets the progress lines alone."""
    from loadtune import progress

    return progress.SweepView(err, _show, err.is_terminal and _console().is_terminal, progress.CLOCK)


def _run_sweep(options: "SweepOptions", debug: bool) -> "SweepResult | None":
    """The sweep with its progress view, under torchrun when launched by it; Ctrl-C, SIGTERM and
    a closed terminal stop it with the rows so far kept. An existing output is refused unless
    --resume or --overwrite."""
    from loadtune.present.summary import failure
    from loadtune.sweep_process import torchrun
    from loadtune.sweep_process.pipeline import run_sweep

    err = _err()
    view = _sweep_view(err)
    out_path = options.output.out
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    previous_hup = signal.signal(signal.SIGHUP, _raise_interrupt)  # the terminal closed
    cluster = None
    try:
        torchrun.refuse_nested_ranks(options.ranks)
        if torchrun.launched():
            cluster = torchrun.Cluster()
            if not cluster.leader:
                status = cluster.follow()  # rank 0 plans, prints and writes the CSV
                if status:
                    raise typer.Exit(status)  # as rank 0 ends: it says why
                return None
            options = dataclasses.replace(options, ranks=cluster.world_size, torchrun=True)
        spec = options.spec()
        out_path = options.out_path(spec)
        if cluster is None:
            return run_sweep(options, spec=spec, on_event=view)
        result = run_sweep(options, spec=spec, on_event=view, execute=cluster.run_on_every_rank)
        cluster.close(EXIT_USER_ERROR if failure(result.records) is not None else 0)
        return result
    except LoadtuneError as exc:
        view.stop()
        if cluster is not None:
            cluster.close(EXIT_USER_ERROR)
        _fail(str(exc), debug)
    except KeyboardInterrupt:
        view.stop()
        if cluster is not None:
            cluster.close(EXIT_INTERRUPTED)
        if cluster is None or cluster.leader:  # rank 0 holds the CSV; the others just stop
            _say(err, f"Interrupted. The rows measured so far are in {out_path}; add --resume to the same command "
                      "to measure only the rest.", "Interrupted.", "yellow")
        raise typer.Exit(EXIT_INTERRUPTED)
    finally:
        if cluster is not None:
            cluster.close()
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGHUP, previous_hup)
    return None


def _print_sweep(result: "SweepResult", plot: Path | None, as_json: bool, verbose: bool, debug: bool,
                 started_s: float) -> None:
    """The table, the warnings, the short answer (with --verbose the details first), the files
    and the sweep's wall time since `started_s` (progress.CLOCK); with --json the summary (and
    `wall_s`) on stdout and the rest on stderr. A sweep in which no trial ran is an error (exit 1)
    naming the first failure; its rows stay in the CSV."""
    from loadtune import progress
    from loadtune.present.summary import failure, summary_lines
    from loadtune.present.view import files_line, sweep_shown

    none_ran = failure(result.records)
    if none_ran is not None:
        _fail(f"{none_ran}; every trial's row is in {result.out_path}", debug)
    err = _err()
    console = err if as_json else _console()
    info = result.summary
    _show(console, sweep_shown(result, verbose, console.width))
    for warning in result.warnings:
        _warn(err, str(warning))
    _say_lines(console, summary_lines(info))
    if plot is not None:
        try:
            from loadtune.present.plot import draw_csvs

            info = dataclasses.replace(info, plot=str(draw_csvs([result.out_path], plot)))
        except LoadtuneError as exc:
            _fail(str(exc), debug)
    wall_s = progress.CLOCK() - started_s
    _say(console, files_line(result, plot, verbose, wall_s))
    if as_json:
        _json({**info.to_json(), "wall_s": round(wall_s, 1)})


def _json(data: Any) -> None:
    """A result as JSON on stdout (everything else goes to stderr)."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


@app.command()
def compare(
    csvs: list[Path] = typer.Argument(..., help="Two or more results CSVs; the first is the reference."),
    out: Optional[Path] = typer.Option(None, "--out", help="Write the aligned table as CSV."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace the --out file where it exists."),
    fail_on_flip: bool = typer.Option(False, "--fail-on-flip", help="Exit 3 when the conclusion changed."),
    force: bool = typer.Option(False, "--force", help="Compare files of different configs anyway."),
    as_json: bool = typer.Option(False, "--json", help="Print the comparison as JSON on stdout."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    """Align sweeps from several machines or scales and say whether the conclusion holds; set a
    watched run beside what a sweep measured or predicted for its loader's config."""
    from loadtune.comparison.files import compare as compare_results, load_results
    from loadtune.present.compare_text import comparison_lines, comparison_tables, write_aligned

    console = _err() if as_json else _console()
    try:
        _refuse_existing(out, overwrite)
        comparison = compare_results(load_results(csvs), force=force)
        if out is not None:
            write_aligned(comparison, out)
    except LoadtuneError as exc:
        _fail(str(exc), debug)
    for table in comparison_tables(comparison, console.width):
        _table(console, table)
    lines = comparison_lines(comparison)
    _say_lines(console, lines)
    if out is not None:
        _say(console, f"Aligned CSV: {out}")
    if as_json:
        _json(comparison.to_json(lines, out))
    if fail_on_flip and comparison.changed:
        raise typer.Exit(EXIT_FLIPPED)


@app.command()
def predict(
    csv: Path = typer.Argument(..., help="A results CSV of `loadtune sweep`, or of a watched run (`loadtune "
                               "watch`: one watched config is enough), with this version's columns."),
    cores: Optional[float] = typer.Option(None, "--cores", help="Usable cores of the target machine, shared by "
                                          "all its ranks (default: the source's)."),
    ranks: int = typer.Option(1, "--ranks", min=1, help="Ranks on the target, each with its own DataLoader."),
    step_ms: Optional[float] = typer.Option(None, "--step-ms", help="The target's training step per batch, in ms "
                                            "(default: as measured)."),
    scale: Optional[float] = typer.Option(None, "--scale", help="Data scale on the target, for memory "
                                          "(default: the source's)."),
    ram_gb: Optional[float] = typer.Option(None, "--ram-gb", help="The target's RAM (default: the source's)."),
    shm_gb: Optional[float] = typer.Option(None, "--shm-gb", help="The target's free /dev/shm (default: the "
                                           "source's)."),
    tolerance: Optional[float] = typer.Option(None, "--tolerance", help="Configs predicted within this share of "
                                              "the best are as good; the cheapest is recommended (default 0.03)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Also write the predicted rows as CSV."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace the --out file where it exists."),
    as_json: bool = typer.Option(False, "--json", help="Print the prediction as JSON on stdout."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    """Predict the settings for another machine (cores, ranks, step) from a sweep's or a watched run's CSV."""
    from loadtune.core.kinds import TOLERANCE
    from loadtune.model.predict import forecast_file, out_of_range
    from loadtune.model.predict_values import Target
    from loadtune.present.predict_text import forecast_lines, forecast_table, write_forecast

    target = Target(cores=cores, ranks=ranks, step_ms=step_ms, scale=scale, ram_gb=ram_gb, shm_gb=shm_gb)
    wrong = out_of_range(target, tolerance)
    if wrong is not None:
        raise typer.BadParameter(wrong[1], param_hint=wrong[0])
    try:
        _refuse_existing(out, overwrite)
        result = forecast_file(csv, target, TOLERANCE if tolerance is None else tolerance)
        if out is not None:
            write_forecast(result, out)
    except LoadtuneError as exc:
        _fail(str(exc), debug)
    console = _err() if as_json else _console()
    _table(console, forecast_table(result, width=console.width))
    _say_lines(console, forecast_lines(result))
    if out is not None:
        _say(console, f"CSV: {out}")
    if as_json:
        _json(result.to_json())


@app.command()
def report(
    csvs: list[Path] = typer.Argument(..., help="One or more results CSVs."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Draw them as a chart (PNG), side by side."),
    as_json: bool = typer.Option(False, "--json", help="Print each file's answer as JSON on stdout."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Every trial's bottleneck, not only the "
                                 "baseline's and the recommendation's, and each repeat's figure from the raw "
                                 "samples beside the CSV."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    """Show results CSVs as ranked tables with what limits each trial, each ending with the answer
    its sweep gave (a watched run: each loader and rank, and what to run next), and draw them."""
    from loadtune.present.view import report_shown
    from loadtune.record.record import load_records

    console = _err() if as_json else _console()
    try:
        tables = [(path, load_records(path)) for path in csvs]
        if plot is not None:
            from loadtune.present.plot import draw_csvs

            draw_csvs(csvs, plot)
    except LoadtuneError as exc:
        _fail(str(exc), debug)
    shown, files = report_shown(tables, verbose, console.width)
    _show(console, shown)
    if plot is not None:
        _say(console, f"Chart: {plot}")
    if as_json:
        _json({"files": files, "plot": str(plot) if plot is not None else None})


@app.command()
def profile(
    config: Path = typer.Argument(..., help="YAML config; the baseline loader (after --set) is profiled."),
    sets: list[str] = typer.Option([], "--set", help="Override a config key: KEY=VALUE (VALUE is YAML)."),
    batches: Optional[int] = typer.Option(None, "--batches", help="Profiled batches (default measure.batches)."),
    trace: Optional[Path] = typer.Option(None, "--trace", help="Write a Chrome/Perfetto trace (JSON)."),
    device: Optional[str] = typer.Option(None, "--device", help="auto, cpu, cuda or cuda:I."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    """Run the baseline under torch.profiler with the loop's regions named, and show where time goes."""
    from loadtune.asked.options import MeasureShorthands, SweepOptions
    from loadtune.profile import profile_run

    try:
        spec = SweepOptions(config, tuple(sets), measure=MeasureShorthands(device=device)).spec()
        result = profile_run(spec, batches or spec.config.measure.batches, trace, spec.config.device)
    except LoadtuneError as exc:
        _fail(str(exc), debug)
    console = _console()
    console.print(result.table, highlight=False, markup=False, soft_wrap=True, crop=False)
    _say_lines(console, result.summary_lines())
    if result.trace_path:
        _say(console, f"Trace: {result.trace_path} (open in https://ui.perfetto.dev or chrome://tracing)")


@app.command()
def init(
    path: Optional[Path] = typer.Argument(None, help="Where to write the starter config (default loadtune.yaml)."),
    source: Optional[Path] = typer.Option(None, "--from", help="A watched run's CSV (loadtune watch): the config's "
                                          "loader block holds the watched loader's settings, its sweep the values "
                                          "around them; you fill in the dataset factory."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    """Write a commented starter config that runs the demo dataset, or one from a watched run (--from)."""
    from loadtune.present.starter import DEFAULT_STARTER_PATH, write_from_run, write_starter
    from loadtune.present.view import written_line

    try:
        if source is not None:
            written, loader = write_from_run(source, path or DEFAULT_STARTER_PATH)
        else:
            written, loader = write_starter(path or DEFAULT_STARTER_PATH), None
    except LoadtuneError as exc:
        _fail(str(exc), debug)
    typer.echo(written_line(written, loader, source))


# Options end at SCRIPT: what follows it is the script's, untouched, options included.
SCRIPT_ARGS = {"allow_extra_args": True, "ignore_unknown_options": True, "allow_interspersed_args": False}


@app.command(context_settings=SCRIPT_ARGS)
def watch(
    ctx: typer.Context,
    script: str = typer.Argument(..., metavar="SCRIPT [ARGS]...", help="The training script, run as `python SCRIPT "
                                 "ARGS` runs it (with --module, a module, as `python -m`); what follows it is "
                                 "passed to it untouched."),
    out: Optional[Path] = typer.Option(None, "--out", help="CSV to write (default results/watch-NAME.csv, NAME the "
                                       "script's)."),
    every: float = typer.Option(60.0, "--every", help="Seconds between the progress lines (and the intervals the "
                                "figures are measured over)."),
    module: bool = typer.Option(False, "--module", "-m", help="SCRIPT is a module name, run as `python -m` runs it."),
    tune: bool = typer.Option(False, "--tune", help="Tune each DataLoader as the script trains (loadtune.tune): "
                              "settings tried in the run, each sample once, the best kept; a `tuned` row per "
                              "setting tried."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    """Run an unchanged training script with every DataLoader it iterates watched (with --tune,
    tuned); its output and exit status pass through, and its loaders' figures go to a results CSV
    (status watched; tuned)."""
    if not (math.isfinite(every) and every > 0):
        raise typer.BadParameter(f"must be above 0, got {every:g}", param_hint="--every")
    from loadtune.training_process.script import run_script

    try:
        status = run_script(script, list(ctx.args), out=str(out) if out is not None else None, every_s=every,
                            module=module, tune=tune)
    except LoadtuneError as exc:
        _fail(str(exc), debug)
    raise typer.Exit(status)


def main() -> None:
    app()
