from __future__ import annotations

from loadtune.asked.config import Config
from loadtune.asked.plan import combined_trial, grid_plan, ofat_plan, swept_values
from tests.conftest import tiny_config


def config(**changes) -> Config:
    return Config.model_validate(tiny_config(**changes))


def test_baseline_first_then_each_changed_value_in_order():
    cfg = config(loader={"batch_size": 8, "num_workers": 2, "prefetch_factor": 2},
                 sweep={"num_workers": [0, 1, 2, 4], "prefetch_factor": [1, 2, 4],
                        "persistent_workers": [False, True], "pin_memory": [False, True]})
    trials = ofat_plan(cfg, accelerator=False)
    assert [t.name for t in trials] == [
        "baseline", "num_workers=0", "num_workers=1", "num_workers=4", "prefetch_factor=1",
        "prefetch_factor=4", "persistent_workers=true", "pin_memory=true"]
    by_name = {t.name: t for t in trials}
    assert by_name["prefetch_factor=4"].loader_kwargs["prefetch_factor"] == 4
    assert by_name["prefetch_factor=4"].loader_kwargs["num_workers"] == 2
    assert by_name["pin_memory=true"].skipped
    assert "no accelerator" in by_name["pin_memory=true"].skip_reason
    assert not any(t.skipped for t in trials if t.name != "pin_memory=true")


def test_num_workers_zero_drops_inherited_worker_settings():
    cfg = config(loader={"batch_size": 8, "num_workers": 2, "prefetch_factor": 4, "persistent_workers": True},
                 sweep={"num_workers": [0]})
    zero = ofat_plan(cfg, accelerator=False)[1]
    assert zero.loader_kwargs["prefetch_factor"] is None
    assert zero.loader_kwargs["persistent_workers"] is False
    assert not zero.skipped


def test_worker_settings_without_workers_are_skipped_with_reason():
    cfg = config(loader={"batch_size": 8, "num_workers": 0},
                 sweep={"prefetch_factor": [4], "persistent_workers": [True]})
    trials = ofat_plan(cfg, accelerator=False)
    assert [t.skip_reason for t in trials[1:]] == [
        "DataLoader refuses prefetch_factor=4 with num_workers=0",
        "DataLoader refuses persistent_workers=true with num_workers=0"]


def test_pin_memory_runs_with_an_accelerator():
    trials = ofat_plan(config(), accelerator=True)
    assert not any(t.skipped for t in trials)


def test_values_equal_to_the_baseline_or_repeated_are_not_trials():
    cfg = config(loader={"batch_size": 8, "num_workers": 1}, sweep={"num_workers": [1, 2, 2]})
    assert [t.name for t in ofat_plan(cfg, False)] == ["baseline", "num_workers=2"]


def test_combined_takes_each_keys_best_value():
    cfg = config(loader={"batch_size": 8, "num_workers": 1},
                 sweep={"num_workers": [0, 2], "prefetch_factor": [1, 4]})
    trials = ofat_plan(cfg, accelerator=False)
    ranks = {"baseline": 4, "num_workers=0": 5, "num_workers=2": 1, "prefetch_factor=1": 4,
             "prefetch_factor=4": 2}
    combined = combined_trial(cfg, [(t, ranks[t.name]) for t in trials], accelerator=False)
    assert combined is not None
    assert combined.name == "combined"
    assert combined.loader_kwargs["num_workers"] == 2
    assert combined.loader_kwargs["prefetch_factor"] == 4
    assert combined.value == "num_workers=2, prefetch_factor=4"


def test_no_combined_when_it_repeats_a_trial_or_baseline_wins():
    cfg = config(loader={"batch_size": 8, "num_workers": 1}, sweep={"num_workers": [0, 2], "prefetch_factor": [4]})
    trials = ofat_plan(cfg, accelerator=False)
    only_one_helps = {"baseline": 2, "num_workers=0": 3, "num_workers=2": 1, "prefetch_factor=4": 2}
    assert combined_trial(cfg, [(t, only_one_helps[t.name]) for t in trials], False) is None
    baseline_wins = {"baseline": 1, "num_workers=0": 3, "num_workers=2": 1, "prefetch_factor=4": 2}
    assert combined_trial(cfg, [(t, baseline_wins[t.name]) for t in trials], False) is None
    no_baseline = {"baseline": None, "num_workers=0": 3, "num_workers=2": 1, "prefetch_factor=4": 2}
    assert combined_trial(cfg, [(t, no_baseline[t.name]) for t in trials], False) is None


def test_combinations_keep_the_baselines_value_of_a_key_its_sweep_leaves_out():
    # prefetch_factor: [1, 4] from the baseline's 2: num_workers=2 with persistent workers and
    # the baseline's prefetch depth is a combination too, and the one-at-a-time trials are not
    # doubled by it.
    cfg = config(loader={"batch_size": 8, "num_workers": 1, "prefetch_factor": 2},
                 sweep={"num_workers": [0, 2], "prefetch_factor": [1, 4], "persistent_workers": [True]})
    assert swept_values(cfg) == {"num_workers": [1, 0, 2], "prefetch_factor": [2, 1, 4],
                                 "persistent_workers": [False, True]}
    names = [t.name for t in grid_plan(cfg, accelerator=False)]
    assert "num_workers=2, persistent_workers=true" in names
    assert "persistent_workers=true" in names and "num_workers=2" in names
    assert names[0] == "baseline" and len(names) == len(set(names))
    settings = [t.settings for t in grid_plan(cfg, accelerator=False)]
    assert len(settings) == len(set(settings))
    # 2 worker counts x 3 depths x 2, and no workers once (its worker-only settings collapse)
    assert len(names) == 2 * 3 * 2 + 1


def test_a_config_without_workers_is_named_as_ofat_names_it_whoever_asks_for_it():
    """From a baseline with workers, num_workers=0 drops their settings: its name never carries them
    (`num_workers=0`, not `num_workers=0, prefetch_factor=null`), whether ofat or a strategy's
    follow-up asks for it, so --resume and every reader find it by the same name."""
    from loadtune.asked.plan import trial_for

    cfg = Config(**tiny_config(sweep={"num_workers": [0, 2], "prefetch_factor": [4]},
                               loader={"batch_size": 8, "num_workers": 1, "prefetch_factor": 2}))
    by_ofat = {t.settings: t.name for t in ofat_plan(cfg, False)}
    asked = trial_for(cfg, {"num_workers": 0}, False)
    assert asked.name == "num_workers=0" == by_ofat[asked.settings]
    assert trial_for(cfg, {"num_workers": 0, "prefetch_factor": 4}, False).name == "num_workers=0"
