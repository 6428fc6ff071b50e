"""The package's shape: each room (a folder of loadtune) imports only the rooms below it, no
import cycle, and the offline rooms never reach the process machinery or torch (read statically,
every import, those inside functions included)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "loadtune"
# Each room and the rooms it may import, lowest first: no arrow back up. The modules at the top
# (the CLI, the API, the callbacks, the built-in datasets) may import any room.
ROOMS: dict[str, tuple[str, ...]] = {
    "core": (),
    "asked": ("core",),
    "record": ("core", "asked"),
    "decide": ("core", "asked", "record"),
    "model": ("core", "asked", "record", "decide"),
    "comparison": ("core", "asked", "record", "decide", "model"),
    "present": ("core", "asked", "record", "decide", "model", "comparison"),
    "measure": ("core", "asked", "record", "decide"),
    "parts": ("core", "asked", "record", "measure"),
    "trial_process": ("core", "asked", "record", "measure", "parts"),
    "training_process": ("core", "asked", "record", "decide", "model", "measure", "parts"),
    "sweep_process": ("core", "asked", "record", "decide", "model", "present", "measure", "parts", "trial_process"),
}
# Read results without starting anything: no process room, no torch, whatever they reach.
OFFLINE = ("core", "asked", "record", "decide", "model", "comparison", "present")
PROCESS_SIDES = tuple(f"loadtune.{r}" for r in ROOMS if r not in OFFLINE)
# Measure and run the user's parts: never reach a sentence, table or chart (present).
MEASURING = ("measure", "parts", "trial_process", "training_process")
HEAVY = ("torch", "torchvision")
FIXTURE = Path(__file__).parent / "fixtures" / "v1" / "sweep.csv"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Each module of the package and every module it imports, wherever the import stands."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module)
                # `from loadtune.sweep_process import events` imports the module loadtune.sweep_process.events
                found.update(f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in modules)
        graph[name] = found
    return graph


def _reach(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for target in graph.get(todo.pop(), ()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module, or a module importing itself (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in graph:
                continue
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                item = stack.pop()
                on_stack.discard(item)
                group.append(item)
                if item == node:
                    break
            if len(group) > 1 or node in graph.get(node, ()):
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _inside(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def test_the_graph_sees_imports_inside_functions():
    graph = import_graph()
    assert "loadtune.present.plot" in graph["loadtune.cli"], "cli imports plot inside a command"
    assert "loadtune.trial_process.main" in graph["loadtune.sweep_process.launch"]


def test_cycle_finder_finds_a_planted_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_in_the_package():
    assert _cycles(import_graph()) == []


def room_of(module: str) -> str | None:
    """The room a module of the package lives in; None for the modules at the top."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 and parts[0] == "loadtune" else None


def arrows_back_up(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Each import from one room into another that ROOMS does not let it import."""
    bad = []
    for module, targets in graph.items():
        room = room_of(module)
        if room is None:
            continue
        for target in targets:
            other = room_of(target) if target in graph else None
            if other is not None and other != room and other not in ROOMS.get(room, ()):
                bad.append((module, target))
    return sorted(bad)


def test_every_folder_is_a_room_and_the_rooms_are_in_order():
    folders = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists())
    assert folders == sorted(ROOMS)
    order = list(ROOMS)
    for room, below in ROOMS.items():
        assert all(order.index(b) < order.index(room) for b in below), room


def test_no_room_imports_one_above_it():
    assert arrows_back_up(import_graph()) == []


def test_an_arrow_back_up_is_found():
    """Planted: a measuring room importing a presentation module, the model reaching the strategies."""
    graph = {"loadtune.measure.loop": {"loadtune.present.table"}, "loadtune.present.table": set(),
             "loadtune.model.fitted": {"loadtune.sweep_process.strategy"}, "loadtune.sweep_process.strategy": set(),
             "loadtune.present.view": {"loadtune.model.fitted"}}
    assert arrows_back_up(graph) == [("loadtune.measure.loop", "loadtune.present.table"),
                                     ("loadtune.model.fitted", "loadtune.sweep_process.strategy")]


def test_offline_readers_import_neither_the_process_machinery_nor_torch():
    graph = import_graph()
    offline = [m for m in graph if room_of(m) in OFFLINE]
    assert len(offline) >= 40
    for module in offline:
        reached = _reach(graph, module)
        bad = sorted(r for r in reached if _inside(r, PROCESS_SIDES) or r.split(".")[0] in HEAVY)
        assert not bad, f"{module} reaches {bad}"


def test_the_measuring_side_reaches_no_presentation():
    graph = import_graph()
    for module in (m for m in graph if room_of(m) in MEASURING):
        reached = _reach(graph, module)
        assert not [r for r in reached if room_of(r) == "present"], module


def test_the_trial_side_imports_nothing_of_the_sweep_side():
    graph = import_graph()
    for module in (m for m in graph if _inside(m, ("loadtune.trial_process",))):
        reached = _reach(graph, module)
        assert not [r for r in reached if _inside(r, ("loadtune.sweep_process",))], module


# What renders results for the user (tables, charts, the answer's sentences): the sweep side
# builds values (present.summary, present.summary_parts, present.sweep) and leaves their
# rendering to the CLI.
PRESENTATION = ("loadtune.present.report", "loadtune.present.answer", "loadtune.present.plot",
                "loadtune.present.table", "loadtune.present.view", "loadtune.present.compare_text",
                "loadtune.present.predict_text", "loadtune.present.watched_run", "rich")


def test_the_sweep_side_imports_no_presentation_module():
    graph = import_graph()
    for module in (m for m in graph if _inside(m, ("loadtune.sweep_process",))):
        assert not [m for m in graph[module] if _inside(m, PRESENTATION)], module


def test_the_strategies_and_the_model_import_each_other_not():
    graph = import_graph()
    assert "loadtune.sweep_process.strategy" not in _reach(graph, "loadtune.sweep_process.modelling")


@pytest.mark.slow
@pytest.mark.parametrize("command", [["report"], ["compare", "--force"]])
def test_report_and_compare_start_without_torch(command, tmp_path):
    """Checked in a real process with -X importtime, which lists every module imported."""
    files = [str(FIXTURE)] if command == ["report"] else [str(FIXTURE), str(FIXTURE)]
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "loadtune", *command, *files],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "loadtune.record.record" in imported
    assert not [m for m in imported if m.split(".")[0] in HEAVY], "torch was imported"


@pytest.mark.slow
def test_a_sweep_leaves_torch_to_its_trial_processes(tmp_path, write_config, marker):
    """Importing torch costs seconds at a sweep's start and end: the sweep process asks its
    preflight (a trial process) for what needs torch, and never imports it itself."""
    from tests.conftest import MARKER_VAR, tiny_config

    config = write_config(tiny_config(sweep={}, measure={"warmup_batches": 1, "batches": 4, "repeats": 1}))
    code = ("import runpy, sys\n"
            f"sys.argv = ['loadtune', 'sweep', {str(config)!r}, '--out', {str(tmp_path / 'out.csv')!r}]\n"
            "try:\n"
            "    runpy.run_module('loadtune', run_name='__main__')\n"
            "finally:\n"
            "    print('torch imported:', 'torch' in sys.modules)\n")
    env = {**__import__("os").environ, MARKER_VAR: marker}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240, env=env)
    assert "Recommended:" in done.stdout, done.stderr
    assert "torch imported: False" in done.stdout
    from loadtune.record.record import read_records

    rows = {r.trial: r for r in read_records(tmp_path / "out.csv")}
    baseline = rows["baseline"]
    assert baseline.status == "ok" and baseline.run.machine.torch_version, "torch's version, from the preflight"


def test_no_room_hides_a_function_of_the_api():
    """A room named as one of loadtune's functions (loadtune.compare) would replace it once imported."""
    import importlib
    import pkgutil

    import loadtune

    api = [name for name in ("sweep", "compare", "predict", "watch", "tune") if callable(getattr(loadtune, name))]
    assert len(api) == 5
    for module in pkgutil.walk_packages(loadtune.__path__, "loadtune."):
        importlib.import_module(module.name)
    assert [name for name in api if not callable(getattr(loadtune, name))] == []
    assert not set(api) & set(ROOMS)
