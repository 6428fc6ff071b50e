"""Runs in the sweep process, and schedules: a sweep wired from setup to its conclusion
(pipeline), every user part built once before anything is measured (setup), the search over the
settings (strategy, with the pipeline model in modelling), the racing of each round's trials,
each repeat in a trial process of its own (racer, launch, trial_run), the data check's part
here (checking), the results file as it is written (files), what it tells its watcher (events),
the conclusion (conclude) and a sweep under torchrun (torchrun). Imports the trial side only to
start it; never imported by the offline readers."""
