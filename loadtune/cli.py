"""The command line: the only module that prints or exits."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from loadtune.errors import LoadtuneError

if TYPE_CHECKING:
    from loadtune.options import SweepOptions
    from loadtune.results.sweep import SweepResult
from loadtune.kinds import RankBy, Status, Strategy

EXIT_USER_ERROR = 1
EXIT_FLIPPED = 3
EXIT_INTERRUPTED = 130
TABLE_WIDTH = 160  # when output is not a terminal (a file, a CI log)

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Measure which DataLoader settings keep your accelerator fed.",
)


def _width(stream: Any) -> int | None:
    """The output's width: COLUMNS when set, the terminal's, else TABLE_WIDTH (a file, a CI log)."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    return None if stream.isatty() else TABLE_WIDTH


def _console(stderr: bool = False) -> Console:
    return Console(stderr=stderr, width=_width(sys.stderr if stderr else sys.stdout))


err = _console(stderr=True)


@app.callback()
def _root() -> None:
    """Measure which DataLoader settings keep your accelerator fed."""


def _fail(message: str, debug: bool) -> None:
    if debug:
        err.print_exception()
    err.print(f"[bold red]Error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(EXIT_USER_ERROR)


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


class _ProgressView:
    """Renders sweep events: a bar over trial runs with the current trial's name and an ETA."""

    def __init__(self, console: Console) -> None:
        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("eta"),
                                 TimeRemainingColumn(), console=console, transient=True)
        self.task = None
        self.console = console

    def __call__(self, event: Any) -> None:
        from loadtune.sweep_process import events

        if isinstance(event, events.SweepStarted):
            self.console.print(f"Sweeping ({event.strategy}) on {event.device}, dataset length "
                               f"{event.dataset_len}; rows go to {event.out_path}", highlight=False, markup=False)
            if event.resumed:
                self.console.print(f"Resuming: {event.resumed} trials kept from that file", highlight=False,
                                   markup=False)
            if event.older:
                self.console.print(f"Resuming: {event.older} rows of that file measured again: an older loadtune "
                                   "wrote them, weighing epoch starts by its windows, not the run's epochs",
                                   highlight=False, markup=False)
            self.progress.start()
            self.task = self.progress.add_task("starting", total=None)
        elif isinstance(event, events.RunsPlanned):
            self.progress.update(self.task, total=event.runs)
        elif isinstance(event, events.RunStarted):
            self.progress.update(self.task, description=f"[bold]{escape(event.trial.name)}[/] "
                                                        f"(repeat {event.repeat}/{event.repeats})")
        elif isinstance(event, events.RunFinished):
            self.progress.advance(self.task)
        elif isinstance(event, events.TrialFinished):
            r = event.record
            if r.status == Status.OK:
                how = " (kept)" if event.resumed else f" ({r.repeats} repeat{'s' if r.repeats != 1 else ''}"
                how += "" if event.resumed else (", stopped: clearly behind)" if r.stopped_early else ")")
                text = f"{r.throughput:.1f} samples/s, wait ratio {r.wait_ratio:.3f}{how}"
            else:
                text = f"[yellow]{r.status}[/]: {escape(str(r.reason))}"
            self.progress.console.print(f"  {escape(str(r.trial))}: {text}", highlight=False, soft_wrap=True)
        elif isinstance(event, events.Notice):
            self.progress.console.print(f"[yellow]Warning:[/] {escape(event.text)}", highlight=False, soft_wrap=True)
        elif isinstance(event, events.SweepFinished):
            self.stop()

    def stop(self) -> None:
        if self.task is not None:
            self.progress.stop()


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
    ranks: int = typer.Option(1, "--ranks", min=1, help="Run N data-parallel ranks at once through "
                              "torch.distributed, each with its own DataLoader (default 1)."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON on stdout."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Also show the notes, each bottleneck, the "
                                 "data check, the model and the trials that did not run."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    """Measure each one-at-a-time change of the DataLoader settings and write a ranked CSV."""
    from loadtune.options import SweepOptions

    options = SweepOptions(config, tuple(sets), scale, repeats, batches, warmup, tolerance, budget, device,
                           strategy, rank_by, ranks, resume, out=out)
    result = _run_sweep(options, debug)
    if result is not None:  # None: a torchrun follower, which prints nothing
        _print_sweep(result, plot, as_json, verbose, debug)


def _run_sweep(options: "SweepOptions", debug: bool) -> "SweepResult | None":
    """The sweep with its progress view, under torchrun when launched by it; Ctrl-C, SIGTERM and
    a closed terminal stop it with the rows so far kept."""
    from loadtune.sweep_process import torchrun
    from loadtune.sweep_process.pipeline import run_sweep

    view = _ProgressView(err)
    out_path = options.out
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    previous_hup = signal.signal(signal.SIGHUP, _raise_interrupt)  # the terminal closed
    cluster = None
    try:
        torchrun.refuse_nested_ranks(options.ranks)
        if torchrun.launched():
            cluster = torchrun.Cluster()
            if not cluster.leader:
                cluster.follow()  # rank 0 plans, prints and writes the CSV
                return None
            options = dataclasses.replace(options, ranks=cluster.world_size, torchrun=True)
        spec = options.spec()
        out_path = options.out_path(spec)
        return run_sweep(options, spec=spec, on_event=view,
                         **({"execute": cluster.run_on_every_rank} if cluster is not None else {}))
    except LoadtuneError as exc:
        view.stop()
        _fail(str(exc), debug)
    except KeyboardInterrupt:
        view.stop()
        if cluster is None or cluster.leader:  # rank 0 holds the CSV; the others just stop
            err.print(f"[yellow]Interrupted.[/] The rows measured so far are in {escape(str(out_path))}; "
                      f"add --resume to the same command to measure only the rest.", highlight=False)
        raise typer.Exit(EXIT_INTERRUPTED)
    finally:
        if cluster is not None:
            cluster.close()
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGHUP, previous_hup)
    return None


def _print_sweep(result: "SweepResult", plot: Path | None, as_json: bool, verbose: bool, debug: bool) -> None:
    """The table, the warnings, the short answer (with --verbose the details first), the files;
    with --json the summary on stdout and the rest on stderr."""
    from loadtune.results.report import (
        detail_lines,
        flagged_lines,
        not_run_lines,
        predicted_lines,
        results_table,
        summary_lines,
    )

    console = err if as_json else _console()
    info = result.summary
    on_ranks = f", {info.ranks} ranks" if info.ranks > 1 else ""
    title = f"{info.config} (scale x{info.scale:g}, {info.device}{on_ranks}, {info.strategy}, ranked by {info.rank_by})"
    console.print(results_table(result.records, title=title, width=console.width), crop=False)
    lines = [f"  not run: {line}" for line in not_run_lines(result.records, skipped=verbose)]
    if verbose:
        lines += [f"  {line}" for line in predicted_lines(result.records)]
        lines += [f"  not ranked: {line}" for line in flagged_lines(result.records)]
        lines += detail_lines(info)
    _print_lines(console, lines)
    for warning in result.warnings:
        err.print(f"[yellow]Warning:[/] {escape(str(warning))}", highlight=False, soft_wrap=True)
    _print_lines(console, summary_lines(info))
    files = [f"{result.out_path} (CSV)"] + ([f"{info.per_rank_csv} (per rank)"] if info.per_rank_csv else [])
    if plot is not None:
        try:
            from loadtune.results.plot import draw_csvs

            info = dataclasses.replace(info, plot=str(draw_csvs([result.out_path], plot)))
            files.append(f"{plot} (chart)")
        except LoadtuneError as exc:
            _fail(str(exc), debug)
    more = "" if verbose else f"; details: loadtune report {result.out_path}, or --verbose"
    _print_lines(console, [f"Files: {', '.join(files)}{more}"])
    if as_json:
        sys.stdout.write(json.dumps(info.to_json(), indent=2, default=str) + "\n")


def _print_lines(console: Console, lines: list[str]) -> None:
    for line in lines:
        console.print(line, highlight=False, soft_wrap=True, markup=False)


@app.command()
def compare(
    csvs: list[Path] = typer.Argument(..., help="Two or more results CSVs; the first is the reference."),
    out: Optional[Path] = typer.Option(None, "--out", help="Write the aligned table as CSV."),
    fail_on_flip: bool = typer.Option(False, "--fail-on-flip", help="Exit 3 when the conclusion changed."),
    force: bool = typer.Option(False, "--force", help="Compare files of different configs anyway."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    """Align sweeps from several machines or scales and say whether the conclusion holds; set a
    watched run beside what a sweep measured or predicted for its loader's config."""
    from loadtune.results.compare import compare as compare_results
    from loadtune.results.compare import comparison_lines, comparison_table, load_results, run_table, write_aligned

    console = _console()
    try:
        comparison = compare_results(load_results(csvs), force=force)
        if out is not None:
            write_aligned(comparison, out)
    except LoadtuneError as exc:
        _fail(str(exc), debug)
    if len(comparison.sweep_labels) != 1 or not comparison.run_labels:
        console.print(comparison_table(comparison, width=console.width), crop=False)
    if comparison.runs:
        console.print(run_table(comparison, width=console.width), crop=False)
    for line in comparison_lines(comparison):
        console.print(line, highlight=False, soft_wrap=True, markup=False)
    if out is not None:
        console.print(f"Aligned CSV: {out}", highlight=False, markup=False)
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
    as_json: bool = typer.Option(False, "--json", help="Print the prediction as JSON on stdout."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    """Predict the settings for another machine (cores, ranks, step) from a sweep's or a watched run's CSV."""
    from loadtune.kinds import TOLERANCE
    from loadtune.results.transfer import (
        Target,
        forecast_file,
        forecast_lines,
        forecast_table,
        write_forecast,
    )

    for value, hint, ok, what in ((cores, "--cores", lambda v: v > 0, "above 0"),
                                  (step_ms, "--step-ms", lambda v: v > 0, "above 0"),
                                  (scale, "--scale", lambda v: v > 0, "above 0"),
                                  (ram_gb, "--ram-gb", lambda v: v > 0, "above 0"),
                                  (shm_gb, "--shm-gb", lambda v: v >= 0, "0 or more"),
                                  (tolerance, "--tolerance", lambda v: 0 <= v < 1, "at least 0 and below 1")):
        if value is not None and not (math.isfinite(value) and ok(value)):
            raise typer.BadParameter(f"must be {what}, got {value:g}", param_hint=hint)
    target = Target(cores=cores, ranks=ranks, step_ms=step_ms, scale=scale, ram_gb=ram_gb, shm_gb=shm_gb)
    try:
        result = forecast_file(csv, target, TOLERANCE if tolerance is None else tolerance)
        if out is not None:
            write_forecast(result, out)
    except LoadtuneError as exc:
        _fail(str(exc), debug)
    console = err if as_json else _console()
    console.print(forecast_table(result, width=console.width), crop=False)
    for line in forecast_lines(result):
        console.print(line, highlight=False, soft_wrap=True, markup=False)
    if out is not None:
        console.print(f"CSV: {out}", highlight=False, markup=False)
    if as_json:
        sys.stdout.write(json.dumps(result.to_json(), indent=2, default=str) + "\n")


@app.command()
def report(
    csvs: list[Path] = typer.Argument(..., help="One or more results CSVs."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Draw them as a chart (PNG), side by side."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Every trial's bottleneck, not only the "
                                 "baseline's and the recommendation's, and each repeat's figure from the raw "
                                 "samples beside the CSV."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    """Show results CSVs as ranked tables with what limits each trial (a watched run: each loader and
    rank, and what to run next), and draw them."""
    from loadtune.results.record import load_records
    from loadtune.results.report import (
        LEGEND,
        finding_lines,
        flagged_lines,
        noise_warnings,
        not_run_lines,
        predicted_lines,
        repeat_lines,
        report_title,
        results_table,
    )
    from loadtune.results.watched import WATCHED_LEGEND, watched_lines, watched_table

    console = _console()
    try:
        tables = [(path, load_records(path)) for path in csvs]
        if plot is not None:
            from loadtune.results.plot import draw_csvs

            draw_csvs(csvs, plot)
    except LoadtuneError as exc:
        _fail(str(exc), debug)
    legends: list[str] = []
    for path, all_rows in tables:
        run_rows = [r for r in all_rows if r.watched]
        if run_rows:
            title = f"{report_title(run_rows, path.name)} (a watched run)"
            console.print(watched_table(run_rows, title=title, width=console.width), crop=False)
            _print_lines(console, watched_lines(run_rows, path))
            legends += [line for line in WATCHED_LEGEND if line not in legends]
        rows = [r for r in all_rows if not r.watched]
        if run_rows and not rows:
            continue
        legends += [line for line in LEGEND if line not in legends]
        console.print(results_table(rows, title=report_title(rows, path.name), width=console.width), crop=False)
        for line in not_run_lines(rows):
            console.print(f"  not run: {line}", highlight=False, soft_wrap=True, markup=False)
        for line in predicted_lines(rows):
            console.print(f"  {line}", highlight=False, soft_wrap=True, markup=False)
        for line in flagged_lines(rows):
            console.print(f"  not ranked: {line}", highlight=False, soft_wrap=True, markup=False)
        _print_lines(console, finding_lines(rows, every_trial=verbose))
        if verbose:
            _print_lines(console, repeat_lines(path, rows))
        for line in noise_warnings(rows):
            console.print(f"[yellow]Warning:[/] {escape(str(line))}", highlight=False, soft_wrap=True)
    for line in legends:
        console.print(line, style="dim", highlight=False, soft_wrap=True, markup=False)
    if plot is not None:
        console.print(f"Chart: {plot}", highlight=False, markup=False)


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
    from loadtune.options import SweepOptions
    from loadtune.profile import profile_run

    try:
        spec = SweepOptions(config, tuple(sets), device=device).spec()
        result = profile_run(spec, batches or spec.config.measure.batches, trace, spec.config.device)
    except LoadtuneError as exc:
        _fail(str(exc), debug)
    console = _console()
    console.print(result.table, highlight=False, markup=False, soft_wrap=True)
    for line in result.summary_lines():
        console.print(line, highlight=False, soft_wrap=True, markup=False)
    if result.trace_path:
        console.print(f"Trace: {result.trace_path} (open in https://ui.perfetto.dev or chrome://tracing)",
                      highlight=False)


@app.command()
def init(
    path: Optional[Path] = typer.Argument(None, help="Where to write the starter config (default loadtune.yaml)."),
    source: Optional[Path] = typer.Option(None, "--from", help="A watched run's CSV (loadtune watch): the config's "
                                          "loader block holds the watched loader's settings, its sweep the values "
                                          "around them; you fill in the dataset factory."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    """Write a commented starter config that runs the demo dataset, or one from a watched run (--from)."""
    from loadtune.starter import DEFAULT_STARTER_PATH, write_from_run, write_starter

    try:
        if source is not None:
            written, loader = write_from_run(source, path or DEFAULT_STARTER_PATH)
        else:
            written, loader = write_starter(path or DEFAULT_STARTER_PATH), None
    except LoadtuneError as exc:
        _fail(str(exc), debug)
    if loader is not None:
        typer.echo(f"Wrote {written} with the settings of {loader!r}, watched in {source}; fill in its "
                   f"dataset.factory, then run: loadtune sweep {written}")
    else:
        typer.echo(f"Wrote {written}; edit it, then run: loadtune sweep {written}")


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
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    """Run an unchanged training script with every DataLoader it iterates watched; its output and
    exit status pass through, and its loaders' figures go to a results CSV (status watched)."""
    if not (math.isfinite(every) and every > 0):
        raise typer.BadParameter(f"must be above 0, got {every:g}", param_hint="--every")
    from loadtune.training_process.script import run_script

    try:
        status = run_script(script, list(ctx.args), out=str(out) if out is not None else None, every_s=every,
                            module=module)
    except LoadtuneError as exc:
        _fail(str(exc), debug)
    raise typer.Exit(status)


def main() -> None:
    app()
