"""Runs inside a trial process (forked from the trial server): the entry point and its job (main,
jobs), a trial built and measured (execute: the user's dataset, DataLoader and step, and the
measured loop), the line to the sweep (channel), data-parallel ranks and the watch that names a
rank that stalls (ranks, phases, stacks), the user's parts built once before any trial
(preflight), the trial ended when the sweep dies (watchdog), the trial server's first import
(server_init) and the sampler's indices (sampled). Imports nothing of the sweep side."""
