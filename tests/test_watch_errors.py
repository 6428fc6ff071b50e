"""`loadtune watch` given something python could not run: a module that is not there, a package
without __main__, a folder, a file given to -m. Each is one `Error:` line and exit status 1,
before anything runs; a module that is there but fails as it imports keeps its own traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.slow  # each test runs the CLI


def error_line(tmp_path: Path, *args: str) -> str:
    done = run_cli("watch", *args, cwd=tmp_path, timeout=120)
    assert done.returncode == 1, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), done.stderr
    assert not (tmp_path / "results").exists(), "nothing ran: no results folder"
    return lines[0]


def test_a_module_that_is_not_there(tmp_path):
    assert error_line(tmp_path, "-m", "no.such") == "Error: no.such: no module named no.such"


def test_a_submodule_that_is_not_there(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    assert error_line(tmp_path, "-m", "pkg.trian") == "Error: pkg.trian: no module named pkg.trian"


def test_a_package_without_a_main_module(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    line = error_line(tmp_path, "-m", "pkg")
    assert line.startswith("Error: pkg: a package without a __main__ module") and "-m pkg.MODULE" in line


def test_a_file_given_as_a_module(tmp_path):
    (tmp_path / "train.py").write_text("raise SystemExit('not to be run')\n")
    line = error_line(tmp_path, "-m", "train.py")
    assert line == "Error: train.py: a file, not a module name: leave out -m to run it as a script"


@pytest.mark.parametrize("with_main", [True, False])
def test_a_directory(tmp_path, with_main):
    folder = tmp_path / "trainer"
    folder.mkdir()
    if with_main:
        (folder / "__main__.py").write_text("print('trained')\n")
    line = error_line(tmp_path, "trainer")
    assert line.startswith("Error: trainer: is a directory, not a script")
    assert "no such script" not in line
    if with_main:
        assert "loadtune watch trainer/__main__.py" in line and "loadtune watch -m trainer" in line
    else:
        assert "__main__" not in line


def test_a_script_that_is_not_there_is_still_said_so(tmp_path):
    assert error_line(tmp_path, "nope.py") == "Error: nope.py: no such script"


def test_a_module_that_is_there_runs_and_one_that_fails_to_import_keeps_its_traceback(tmp_path):
    (tmp_path / "trainer").mkdir()
    (tmp_path / "trainer" / "__main__.py").write_text("print('trained')\n")
    done = run_cli("watch", "-m", "trainer", cwd=tmp_path, timeout=120)
    assert done.returncode == 0 and "trained" in done.stdout, done.stderr
    (tmp_path / "broken.py").write_text("import no_such_dependency_of_the_script\n")
    done = run_cli("watch", "-m", "broken", cwd=tmp_path, timeout=120)
    assert done.returncode == 1
    assert "Traceback" in done.stderr and "No module named 'no_such_dependency_of_the_script'" in done.stderr
    assert "Error: broken" not in done.stderr
