"""report, compare, init and profile through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from PIL import Image

from loadtune.asked.config import Config, RunSpec, load_config
from tests.conftest import run_cli, tiny_config

pytestmark = pytest.mark.slow  # every test runs the CLI in a process of its own

FIXTURES = Path(__file__).parent / "fixtures"
REPORT_CSV = FIXTURES / "report" / "demo-vm-x1.csv"


def test_report_table_matches_the_golden_text():
    # From the file's folder: the answer names the file as given (loadtune predict FILE).
    result = run_cli("report", REPORT_CSV.name, cwd=REPORT_CSV.parent)
    assert result.returncode == 0, result.stderr
    golden = (FIXTURES / "report" / "demo-vm-x1.report.txt").read_text()
    assert result.stdout == golden


def test_report_draws_several_csvs_side_by_side(tmp_path):
    png = tmp_path / "cmp.png"
    result = run_cli("report", str(REPORT_CSV), str(FIXTURES / "report" / "demo-box8-x1.csv"), "--plot", str(png))
    assert result.returncode == 0, result.stderr
    with Image.open(png) as image:
        assert image.format == "PNG" and image.width > 1000 and image.height > 300


def test_report_of_a_missing_or_foreign_file_is_a_user_error(tmp_path):
    assert run_cli("report", str(tmp_path / "none.csv")).returncode == 1
    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    result = run_cli("report", str(other))
    assert result.returncode == 1 and "not a loadtune results CSV" in result.stderr


def test_compare_verdicts_and_exit_codes(tmp_path):
    base = FIXTURES / "compare" / "base.csv"
    same = run_cli("compare", str(base), str(FIXTURES / "compare" / "same.csv"), "--fail-on-flip")
    assert same.returncode == 0 and "conclusion holds" in same.stdout
    out = tmp_path / "aligned.csv"
    flipped = run_cli("compare", str(base), str(FIXTURES / "compare" / "flipped.csv"), "--out", str(out))
    assert flipped.returncode == 0 and "conclusion changed" in flipped.stdout
    assert "tau" in flipped.stdout.lower()
    assert "trial" in pd.read_csv(out).columns
    assert run_cli("compare", str(base), str(FIXTURES / "compare" / "flipped.csv"),
                   "--fail-on-flip").returncode == 3
    refused = run_cli("compare", str(base), str(FIXTURES / "compare" / "other_config.csv"))
    assert refused.returncode == 1 and refused.stderr.strip().startswith("Error:")
    assert run_cli("compare", str(base), str(FIXTURES / "compare" / "other_config.csv"), "--force").returncode == 0


def test_init_writes_a_config_that_loads_and_refuses_to_overwrite(tmp_path):
    path = tmp_path / "start.yaml"
    done = run_cli("init", str(path))
    assert done.returncode == 0, done.stderr
    assert f"loadtune sweep {path}" in done.stdout
    # The file loads through the config loader a sweep uses, into a validated config that
    # measures the demo with short windows.
    spec = load_config(path)
    assert isinstance(spec, RunSpec) and isinstance(spec.config, Config)
    cfg = spec.config
    assert spec.name == "start" and spec.path == path.resolve() and len(spec.sha) == 12
    assert cfg.dataset.factory == "loadtune.demo:synthetic_images"
    assert cfg.dataset.kwargs == {"num_images": 1000} and cfg.dataset.scale_kwarg == "num_images"
    assert (cfg.loader.batch_size, cfg.loader.num_workers, cfg.loader.prefetch_factor) == (32, 1, 2)
    assert cfg.sweep == {"num_workers": [0, 2, 4], "prefetch_factor": [4], "persistent_workers": [True],
                         "pin_memory": [True]}
    assert cfg.step.sleep_s == 0.05
    assert (cfg.measure.warmup_batches, cfg.measure.batches, cfg.measure.repeats) == (2, 10, 2)
    assert cfg.device == "auto" and cfg.output is None
    assert load_config(path, scale=0.5).config.dataset.kwargs == {"num_images": 500}
    written = path.read_text()
    again = run_cli("init", str(path))
    assert again.returncode == 1 and "already exists" in again.stderr
    assert path.read_text() == written


def test_profile_prints_grouped_regions_and_writes_a_trace(write_config, tmp_path):
    trace = tmp_path / "trace.json"
    config = write_config(tiny_config(measure={"warmup_batches": 1, "batches": 4, "repeats": 1}))
    result = run_cli("profile", str(config), "--batches", "4", "--trace", str(trace))
    assert result.returncode == 0, result.stderr
    assert "loadtune.wait" in result.stdout and "loadtune.step" in result.stdout
    names = {event.get("name") for event in json.loads(trace.read_text())["traceEvents"]}
    assert {"loadtune.wait", "loadtune.step"} <= names
    assert "loadtune.h2d" not in names  # the config's device is cpu: nothing is copied


def test_sweep_plot_writes_the_chart_next_to_the_csv(write_config, tmp_path):
    config = tiny_config(sweep={"num_workers": [0]}, measure={"warmup_batches": 1, "batches": 4, "repeats": 1})
    png = tmp_path / "chart.png"
    result = run_cli("sweep", str(write_config(config)), "--out", str(tmp_path / "c.csv"), "--plot", str(png))
    assert result.returncode == 0, result.stderr
    files = result.stdout[result.stdout.rindex("Files: "):]  # the files line ends the answer (wrapped at spaces)
    assert f"{png} (chart)" in " ".join(files.split())
    with Image.open(png) as image:
        assert image.width > 500
