"""The Python API: the same sweep as the CLI, from a script, with typed results."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pandas as pd
import pytest

import loadtune
from loadtune.api import load
from loadtune.core.errors import ConfigError
from loadtune.synthetic import sleep_cost
from tests.conftest import MARKER_VAR, run_cli, tiny_config


def test_a_config_mapping_with_an_importable_callable_becomes_a_spec():
    config = tiny_config(dataset={"factory": sleep_cost, "kwargs": {"num_samples": 40}})
    spec = load(config, overrides={"loader.batch_size": 4}, repeats=1)
    assert spec.config.dataset.factory == "loadtune.synthetic:sleep_cost"
    assert spec.config.loader.batch_size == 4 and spec.config.measure.repeats == 1


def test_a_factory_defined_in_main_is_refused_with_the_remedy():
    def make_dataset():  # what a notebook cell defines: its module is __main__
        return []

    make_dataset.__module__ = "__main__"
    with pytest.raises(ConfigError, match=r"dataset\.factory: 'make_dataset' is defined in the notebook.*\.py file"):
        load(tiny_config(dataset={"factory": make_dataset}))


def test_an_unknown_option_is_refused():
    with pytest.raises(TypeError, match="unexpected option 'repeets'"):
        load(tiny_config(), repeets=2)


@pytest.mark.slow
def test_the_api_from_a_script_gives_the_rows_the_cli_gives_and_trials_do_not_run_the_script(write_config, tmp_path,
                                                                                                marker):
    path = write_config(tiny_config(sweep={"num_workers": [0, 2]},
                                    measure={"warmup_batches": 1, "batches": 6, "repeats": 1, "timeout_s": 60}))
    cli_out = tmp_path / "cli.csv"
    done = run_cli("sweep", str(path), "--out", str(cli_out), marker=marker)
    assert done.returncode == 0, done.stderr
    script = tmp_path / "run.py"
    runs = tmp_path / "runs.txt"  # a line each time the script's top level runs
    script.write_text(textwrap.dedent(f"""
        import json, os, loadtune
        with open({str(runs)!r}, "a") as f:
            f.write(f"{{os.getpid()}}\\n")
        if __name__ == "__main__":
            r = loadtune.sweep({str(path)!r}, out={str(tmp_path / 'api.csv')!r})
            first = [x for x in r.rows if x.run.round == 1]
            print(json.dumps({{"trials": [(x.trial, x.status, x.settings.num_workers) for x in first],
                              "all": [x.trial for x in r.rows],
                              "recommended": r.recommended.trial, "kwargs": r.loader_kwargs,
                              "decided": r.decided, "columns": list(r.frame.columns)}}))
    """))
    env = {**__import__("os").environ, MARKER_VAR: marker}
    ran = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240, env=env,
                         cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    got = json.loads(ran.stdout.strip().splitlines()[-1])
    cli = pd.read_csv(cli_out)
    cli = cli[cli["round"] == 1]  # later rounds sit on the winner, which noise may change
    assert sorted(t for t, _, _ in got["trials"]) == sorted(cli.trial)
    assert {t: s for t, s, _ in got["trials"]} == dict(zip(cli.trial, cli.status))
    assert got["recommended"] in got["all"] and got["kwargs"]["batch_size"] == 8
    assert got["columns"][:2] == ["rank", "trial"] and isinstance(got["decided"], bool)
    comparison = loadtune.compare(cli_out, tmp_path / "api.csv")
    assert comparison.verdict.startswith("conclusion")
    # The trial processes, forked from the trial server, did not run the script again.
    assert len(runs.read_text().splitlines()) == 1
