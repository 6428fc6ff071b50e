"""Runs in the sweep process: plans the trials, starts each repeat in a trial process of its own
and samples it from outside, derives the figures, ranks, and writes the results record.
Imports the trial side only to start it; never imported by the offline readers."""
