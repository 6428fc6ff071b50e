from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from loadtune.core.errors import ResultsError
from loadtune.present.plot import draw_results, read_results_csv, trial_order
from loadtune.record.record import COLUMNS

FIXTURES = Path(__file__).parent / "fixtures" / "report"
VM = FIXTURES / "demo-vm-x1.csv"        # ok, skipped, failed, timeout and ideal rows
BOX8 = FIXTURES / "demo-box8-x1.csv"    # another machine, other ranking, fewer trials


def looks_drawn(path: Path, min_size: tuple[int, int]) -> np.ndarray:
    """Open the image, check its size and that it is not blank; return its pixels."""
    with Image.open(path) as image:
        assert image.format == "PNG"
        width, height = image.size
        pixels = np.asarray(image.convert("RGB"))
    assert width >= min_size[0] and height >= min_size[1]
    assert width <= 1700 and height <= 4000
    assert pixels.std() > 20, "the image is (nearly) one colour"
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 50
    return pixels


def test_fixture_csvs_start_with_the_spec_columns_in_order():
    spec_columns = COLUMNS[: COLUMNS.index("started_at") + 1]  # the contract's columns; later ones may grow
    for path in (VM, BOX8):
        header = path.read_text().splitlines()[0].split(",")
        assert tuple(header[: len(spec_columns)]) == spec_columns


def test_one_csv_with_rows_that_did_not_run(tmp_path):
    df = read_results_csv(VM)
    assert {"ok", "skipped", "failed", "timeout"} <= set(df["status"])
    out = draw_results([(VM.name, df)], tmp_path / "sub" / "chart.png")
    assert out == tmp_path / "sub" / "chart.png"
    pixels = looks_drawn(out, (900, 400))
    # Best bar (green), baseline bar (blue) and the wait-ratio bars (orange) are all there.
    def has(color):
        return (np.abs(pixels.astype(int) - color).sum(axis=2) < 30).sum() > 200
    assert has((0x2F, 0x9E, 0x44)) and has((0x4C, 0x6E, 0xF5)) and has((0xF0, 0x8C, 0x00))


def test_two_csvs_side_by_side_are_wider(tmp_path):
    one = draw_results([(VM.name, read_results_csv(VM))], tmp_path / "one.png")
    two = draw_results([(VM.name, read_results_csv(VM)), (BOX8.name, read_results_csv(BOX8))],
                       tmp_path / "two.png")
    looks_drawn(two, (1200, 400))
    assert Image.open(two).size[0] > Image.open(one).size[0]


def test_height_grows_with_trials(tmp_path):
    df = read_results_csv(VM)
    small = draw_results([("a", df.head(3))], tmp_path / "small.png")
    big = draw_results([("b", df)], tmp_path / "big.png")
    assert Image.open(big).size[1] > Image.open(small).size[1]


def test_order_follows_first_csv_ranking_and_leaves_ideal_out():
    vm, box = read_results_csv(VM), read_results_csv(BOX8)
    order = trial_order([("vm", vm), ("box", box)])
    assert "ideal" not in order
    assert order[:3] == ["num_workers=2", "num_workers=3", "baseline"]
    assert order[-3:] == ["pin_memory=true", "num_workers=8", "prefetch_factor=16"]
    shuffled = vm.sample(frac=1, random_state=3)
    assert trial_order([("vm", shuffled)])[:2] in (["num_workers=2", "num_workers=3"],
                                                   ["num_workers=3", "num_workers=2"])


def test_nothing_ran_still_draws(tmp_path):
    df = read_results_csv(VM)
    df = df[df["status"] != "ok"]
    looks_drawn(draw_results([("none", df)], tmp_path / "none.png"), (900, 250))


PYPLOT_PROBE = """
import json, sys
import matplotlib
from loadtune.present.plot import draw_results, read_results_csv
before = matplotlib.rcParams["backend"]
out = draw_results([("vm", read_results_csv(sys.argv[1]))], sys.argv[2])
pyplot = "matplotlib.pyplot" in sys.modules  # read before anything below could import it
print(json.dumps({"pyplot": pyplot, "before": before, "after": matplotlib.rcParams["backend"],
                  "written": out.is_file()}))
"""


@pytest.mark.slow  # a fresh interpreter
def test_pyplot_is_not_touched(tmp_path):
    # A fresh interpreter, so no other test's import of pyplot can hide one made by drawing.
    # The backend is set to one the chart does not use, so a switch to Agg would show.
    env = {**os.environ, "MPLBACKEND": "svg"}
    done = subprocess.run([sys.executable, "-c", PYPLOT_PROBE, str(VM), str(tmp_path / "c.png")],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["written"]
    assert seen["pyplot"] is False
    assert seen["before"] == "svg" and seen["after"] == "svg"


def test_unreadable_or_wrong_csvs_name_the_file(tmp_path):
    with pytest.raises(ResultsError, match="nope.csv"):
        read_results_csv(tmp_path / "nope.csv")
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(ResultsError, match="empty.csv"):
        read_results_csv(empty)
    other = tmp_path / "other.csv"
    pd.DataFrame({"a": [1], "b": [2]}).to_csv(other, index=False)
    with pytest.raises(ResultsError, match=r"other.csv.*missing column.*trial"):
        read_results_csv(other)
    with pytest.raises(ResultsError):
        draw_results([], tmp_path / "x.png")
