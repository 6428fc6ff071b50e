"""The rerun an undecided answer suggests (answer.settle) measures what is undecided again: more
repeats than any contender holds, a larger budget, or the contenders kept without raw samples
measured anew."""

from __future__ import annotations

import re

import pytest

from loadtune.core.kinds import EndedBy
from loadtune.decide.decision import Decision, Resolving
from loadtune.present.answer import settle


def undecided(ended_by: EndedBy | None, repeats: int) -> Decision:
    return Decision(False, 0.03, "num_workers=2", ("num_workers=3",), 0.08, "", ended_by=ended_by,
                    resolving=Resolving(0.05, repeats, 0.08))


@pytest.mark.parametrize("repeats", [1, 2, 3, 5, 8])
def test_more_repeats_than_any_contender_holds(repeats):
    asked = re.fullmatch(r"rerun with --repeats (\d+) --resume", settle(undecided(EndedBy.REPEATS, repeats)))
    assert asked and int(asked.group(1)) > repeats


def test_without_the_sweeps_repeats_no_number_is_named():
    """A decision that does not record measure.repeats cannot name a number known to be above it."""
    assert settle(undecided(EndedBy.REPEATS, 0)) == "rerun with more --repeats than measure.repeats and --resume"
    assert settle(undecided(None, 0)) == settle(undecided(EndedBy.REPEATS, 0))


def test_contenders_kept_without_raw_samples_are_measured_anew():
    assert settle(undecided(EndedBy.KEPT, 3)).startswith("rerun with --overwrite (")
    assert settle(undecided(EndedBy.BUDGET, 3)) == "rerun with a larger --budget and --resume"
