"""The benchmarks' exit status: a script with a goal exits 1 when it misses one (benchmarks/_common.py's
Goals), one without a goal says so. Made-up figures in place of every measurement: nothing is timed,
no process or DataLoader worker is started."""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.conftest import BENCH

SCRIPTS = sorted(p for p in BENCH.glob("*.py") if 'if __name__ == "__main__"' in p.read_text())


def goals_of(bench) -> tuple[Any, list[str]]:
    lines: list[str] = []
    return bench("_common").Goals(out=lines.append), lines


# --- the helper -----------------------------------------------------------------------------------


def test_goals_met_exit_0(bench) -> None:
    goals, lines = goals_of(bench)
    assert goals.check("watched / plain", 1.003, ">=", 0.99, spec=".4f", detail=" [95%: 0.997, 1.009]")
    assert goals.check("largest error", 0.018, "<=", 0.03)
    assert goals.require("every stall reported", True, "rank, phase and stack")
    assert goals.exit_status() == 0
    assert lines[0] == "watched / plain 1.0030 [95%: 0.997, 1.009]: met (goal >= 0.99)"
    assert lines[1] == "largest error 0.018: met (goal <= 0.03)"
    assert lines[2] == "every stall reported: met (goal: rank, phase and stack)"
    assert lines[-1] == "goals: met (3 checked)"


def test_goals_one_miss_exit_1(bench) -> None:
    goals, lines = goals_of(bench)
    goals.check("pick / best", 0.995, ">=", 0.98)
    assert not goals.check("   median error", 0.12, "<=", 0.10)
    assert goals.exit_status() == 1
    assert lines[1] == "   median error 0.120: MISSED (goal <= 0.1)"
    assert lines[-1] == "goals: MISSED 1 of 2: median error"
    assert goals.missed == ["   median error"]


@pytest.mark.parametrize("figure", [None, float("nan")])
def test_goals_a_figure_not_measured_is_missed(bench, figure) -> None:
    goals, lines = goals_of(bench)
    assert not goals.check("ratio", figure, ">=", 0.99)
    assert lines[0] == "ratio n/a: MISSED (goal >= 0.99)"
    assert goals.exit_status() == 1


def test_goals_a_failed_requirement_exit_1(bench) -> None:
    goals, lines = goals_of(bench)
    goals.require("stall in setup", False, "reported in time", detail=" after 9.1 s; not: in time")
    assert lines[0] == "stall in setup after 9.1 s; not: in time: MISSED (goal: reported in time)"
    assert goals.exit_status() == 1


def test_goals_none_checked_exit_1(bench) -> None:
    goals, lines = goals_of(bench)
    assert goals.exit_status() == 1
    assert lines == ["goals: MISSED: no goal was checked"]


def test_goals_bounds_are_inclusive(bench) -> None:
    goals, _ = goals_of(bench)
    assert goals.check("at the bound", 0.10, "<=", 0.10)
    assert goals.check("at the bound", 30, ">=", 30, spec="d")
    assert not goals.check("past it", 31, "<", 31, spec="d")


# --- each script's goals, from made-up figures ---------------------------------------------------------


def test_accuracy_exits_1_when_the_error_is_past_its_goal(bench, monkeypatch) -> None:
    accuracy = bench("accuracy")
    monkeypatch.setattr(sys, "argv", ["accuracy.py", "--quick"])
    monkeypatch.setattr(accuracy, "machine_line", lambda: "machine: made up")
    monkeypatch.setattr(accuracy, "points", lambda quick: iter([(1, 8, 0.002, 0.02)]))
    monkeypatch.setattr(accuracy, "spec_from", lambda config: None)
    monkeypatch.setattr(accuracy, "calibrated_cost_s", lambda batch, cost_s: cost_s)
    monkeypatch.setattr(accuracy, "handover_s", lambda batch, workers, step_s: 0.0001)
    expected = accuracy.model(1, 8, 0.002, 0.02, 0.0001)

    def measured(ratio: float):
        stats = SimpleNamespace(wait_ratio=SimpleNamespace(mean=ratio))
        return lambda spec: (SimpleNamespace(status="ok", reason=""), stats)

    monkeypatch.setattr(accuracy, "run_baseline", measured(expected + 0.01))
    assert accuracy.main() == 0
    monkeypatch.setattr(accuracy, "run_baseline", measured(expected + 0.1))
    assert accuracy.main() == 1


def test_cpu_accounting_exits_1_when_loadtune_and_the_kernel_differ(bench, monkeypatch) -> None:
    cpu = bench("cpu_accounting")
    monkeypatch.setattr(sys, "argv", ["cpu_accounting.py", "--repeats", "1"])
    monkeypatch.setattr(cpu, "machine_line", lambda: "machine: made up")
    monkeypatch.setattr(cpu, "usable_cores", lambda: 2)
    monkeypatch.setattr(cpu, "pipelines", lambda cores: {"made up": ({}, {"num_workers": 2}, 0.001)})
    monkeypatch.setattr(cpu, "spec_from", lambda config, name: None)
    monkeypatch.setattr(cpu, "run_baseline", lambda spec: (SimpleNamespace(result=object()), None))
    monkeypatch.setattr(cpu, "resource_figures", lambda result, cores: [])
    for kernel, status in ((0.93, 0), (0.80, 1)):
        monkeypatch.setattr(cpu, "window_evidence",
                            lambda result, cores, workers, k=kernel: SimpleNamespace(cpu_util=0.92, machine_busy=k))
        assert cpu.main() == status


def test_overhead_exits_1_when_sampling_costs_too_much(bench, monkeypatch) -> None:
    overhead = bench("overhead")
    monkeypatch.setattr(sys, "argv", ["overhead.py"])
    monkeypatch.setattr(overhead, "machine_line", lambda: "machine: made up")
    monkeypatch.setattr(overhead, "harness_cost_us", lambda: 1.7)
    monkeypatch.setattr(overhead, "end_to_end", lambda blocks: 0.0038)
    monkeypatch.setattr(overhead, "sampling", lambda blocks: (0.03, 1.008))
    assert overhead.main() == 0
    monkeypatch.setattr(overhead, "sampling", lambda blocks: (0.03, 0.97))
    assert overhead.main() == 1


def test_ranks_stress_exits_1_when_a_trial_is_not_ok(bench, monkeypatch) -> None:
    import pandas as pd

    stress = bench("ranks_stress")
    monkeypatch.setattr(sys, "argv", ["ranks_stress.py", "--trials-only"])

    def rows(failed: int) -> pd.DataFrame:
        status = ["ok"] * (31 - failed) + ["failed"] * failed
        return pd.DataFrame({"trial": [f"t{i}" for i in range(31)], "status": status, "reason": "",
                             "trial_wall_s": 1.0})

    for failed, code in ((0, 0), (1, 1)):
        monkeypatch.setattr(stress, "sweep", lambda config, folder, name, env, f=failed: (rows(f), 30.0, ""))
        assert stress.main() == code


def recommend_result(name: str, quality: float | None, time_ratio: float = 0.4) -> dict[str, Any]:
    return {"name": name, "quality": quality, "crossed": quality, "time_ratio": time_ratio, "now_s": 40.0 * time_ratio,
            "ref_s": 40.0, "skipped": [], "decided": True, "most_repeats": 3}


def test_recommend_goals_from_made_up_results(bench) -> None:
    recommend = bench("recommend")
    met = [recommend_result(n, 0.99) for n in ("cnn", "io", "cpu")]
    assert recommend.check_goals(met, "49c7878", goals_of(bench)[0]).exit_status() == 0
    for results in ([*met[:2], recommend_result("cpu", 0.95)], [*met[:2], recommend_result("cpu", None)],
                    [*met[:2], recommend_result("cpu", 0.99, time_ratio=0.6)],
                    [*met[:2], {**met[2], "skipped": ["prefetch_factor=4"]}],
                    [*met[:2], {**met[2], "decided": False}]):
        assert recommend.check_goals(results, "49c7878", goals_of(bench)[0]).exit_status() == 1


def test_repeatability_goals_from_made_up_results(bench) -> None:
    rep = bench("repeatability")

    def pipeline(pick: float, failed: bool = False) -> Any:
        runs = [rep.SweepRun(f"run{i}", 60.0, error="exit 1" if failed and i == 2 else None) for i in (1, 2)]
        judged = [rep.PickJudged(r.label, None, [pick, 1.0], [1.0], None) for r in runs]
        return rep.PipelineResult("io", runs, [], 2, rep.Coverage(inside=19, pairs=20), judged)

    assert rep.print_goals([pipeline(0.99)], None, goals_of(bench)[0]).exit_status() == 0
    assert rep.print_goals([pipeline(0.90)], None, goals_of(bench)[0]).exit_status() == 1
    assert rep.print_goals([pipeline(0.99, failed=True)], None, goals_of(bench)[0]).exit_status() == 1


def test_transfer_goals_from_made_up_results(bench) -> None:
    transfer = bench("transfer")

    def judged(share: float, error: float, head: float | None = None) -> dict[str, Any]:
        return {"pipeline": "cpu", "target": "cores1", "pick_share": share, "head_to_head": head,
                "median_error": error}

    assert transfer.check_goals([judged(0.97, 0.05)], goals_of(bench)[0]).exit_status() == 0
    assert transfer.check_goals([judged(0.90, 0.05, head=0.98)], goals_of(bench)[0]).exit_status() == 0
    assert transfer.check_goals([judged(0.97, 0.20)], goals_of(bench)[0]).exit_status() == 1
    assert transfer.check_goals([judged(0.99, 0.05, head=0.93)], goals_of(bench)[0]).exit_status() == 1
    assert transfer.check_goals([], goals_of(bench)[0]).exit_status() == 1


def test_watch_overhead_goal_from_made_up_runs(bench, monkeypatch, tmp_path: Path) -> None:
    watch = bench("watch")
    for watched, code in ((100.5, 0), (97.0, 1)):
        monkeypatch.setattr(watch, "train", lambda config, settings, epochs, out=None, every_s=60.0, w=watched:
                            100.0 if out is None else w)
        goals, _ = goals_of(bench)
        watch.overhead(tmp_path, 2, goals)
        assert goals.exit_status() == code


def test_model_error_goals_from_made_up_errors(bench) -> None:
    me = bench("model_error")

    def judged(name: str, errors: list[float], same: float | None = 1e-6, fitted: bool = True) -> Any:
        return me.Judged(name, errors, same, 2 if same is not None else 0, fitted)

    met = [judged("io", [0.02, 0.05, 0.30]), judged("cpu", [0.04, 0.08])]
    assert me.check_goals(met, goals_of(bench)[0]).exit_status() == 0
    assert me.check_goals([judged("io", [0.12, 0.15, 0.02])], goals_of(bench)[0]).exit_status() == 1
    # Not the sweep's model: its round-2 predictions differ from the refitted model's.
    assert me.check_goals([judged("io", [0.02], same=0.05)], goals_of(bench)[0]).exit_status() == 1
    # A pipeline whose round 1 could not be fitted, or no held-out config at all, is no figure.
    assert me.check_goals([*met, judged("demo", [], fitted=False)], goals_of(bench)[0]).exit_status() == 1
    assert me.check_goals([judged("io", [])], goals_of(bench)[0]).exit_status() == 1


def test_paired_exits_1_when_the_referee_disagrees_with_the_pairs(bench, monkeypatch) -> None:
    import math

    paired = bench("paired")
    monkeypatch.setattr(sys, "argv", ["paired.py", "--pairs", "4", "--referee", "2"])
    monkeypatch.setattr(paired, "machine_line", lambda: "machine: made up")
    whole = SimpleNamespace(run_epoch_batches=None)
    a = SimpleNamespace(name="trial a", trial=SimpleNamespace(name="a"), measure=whole)
    b = SimpleNamespace(name="trial b", trial=SimpleNamespace(name="b"))
    monkeypatch.setattr(paired, "jobs", lambda config, x, y: (a, b, 0.03))
    calls: list[Any] = []

    def measured(job: Any, run_epoch: Any) -> float:
        calls.append(job)
        drift = 0.1 * math.sin(len(calls) // 2)  # the same for a pair's two processes
        return math.log(100.0 if job is a else 90.0) + drift + 0.01 * (len(calls) % 3)

    monkeypatch.setattr(paired, "measured", measured)
    for referee, status in ((0.9, 0), (1.2, 1)):
        calls.clear()
        plain = iter([100.0, 100.0 * referee * 1.01, 100.0 * referee, 100.0])
        monkeypatch.setattr(paired, "plain", lambda config, settings, p=plain: next(p))
        assert paired.main() == status


# --- every script says what its exit status means -------------------------------------------------------


def _has_goal(tree: ast.Module, source: str) -> bool:
    constants = {t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets
                 if isinstance(t, ast.Name) and t.id.startswith("GOAL")}
    return bool(constants) or "Goals(" in source


def _script(path: Path):
    return pytest.param(path, id=path.name)


@pytest.mark.parametrize("path", [_script(p) for p in SCRIPTS])
def test_a_script_with_a_goal_exits_1_on_a_miss_one_without_says_so(path: Path) -> None:
    source = path.read_text()
    tree = ast.parse(source)
    doc = ast.get_docstring(tree) or ""
    if _has_goal(tree, source):
        assert ".exit_status()" in source, f"{path.name}: its goals do not set its exit status (_common.Goals)"
        assert "Exits 1" in doc, f"{path.name}: its docstring does not say it exits 1 on a miss"
    else:
        assert "No goal" in doc, f"{path.name}: no goal, and its docstring does not say so"
