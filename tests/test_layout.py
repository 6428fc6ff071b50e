"""The package's shape: no import cycle, and the offline readers never reach the process
machinery or torch (read statically, every import, those inside functions included)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "loadtune"
OFFLINE = "loadtune.results"
PROCESS_SIDES = ("loadtune.sweep_process", "loadtune.trial_process")
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
    assert "loadtune.results.plot" in graph["loadtune.cli"], "cli imports plot inside a command"
    assert "loadtune.trial_process.main" in graph["loadtune.sweep_process.launch"]


def test_cycle_finder_finds_a_planted_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_in_the_package():
    assert _cycles(import_graph()) == []


def test_offline_readers_import_neither_the_process_machinery_nor_torch():
    graph = import_graph()
    offline = [m for m in graph if m == OFFLINE or m.startswith(OFFLINE + ".")]
    assert len(offline) >= 5
    for module in offline:
        reached = _reach(graph, module)
        bad = sorted(r for r in reached if _inside(r, PROCESS_SIDES) or r.split(".")[0] in HEAVY)
        assert not bad, f"{module} reaches {bad}"


def test_the_trial_side_imports_nothing_of_the_sweep_side():
    graph = import_graph()
    for module in (m for m in graph if _inside(m, ("loadtune.trial_process",))):
        reached = _reach(graph, module)
        assert not [r for r in reached if _inside(r, ("loadtune.sweep_process",))], module


# What renders results for the user (tables, charts, the answer's sentences): the sweep side
# builds values (results.summary, results.summary_parts) and leaves their rendering to the CLI.
PRESENTATION = ("loadtune.results.report", "loadtune.results.answer", "loadtune.results.plot",
                "loadtune.results.table", "rich")


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
    assert "loadtune.results.record" in imported
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
    from loadtune.results.record import read_records

    rows = {r.trial: r for r in read_records(tmp_path / "out.csv")}
    baseline = rows["baseline"]
    assert baseline.status == "ok" and baseline.run.machine.torch_version, "torch's version, from the preflight"
