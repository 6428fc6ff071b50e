"""Measuring a loop and what its figures say, shared by the trial process, the sweep and a
watched run: the measured loop (loop: the warm-up dropped, counted windows, the racing bound
inside a window), what each batch holds (fingerprint), the machine, the process tree's CPU,
memory, threads and reads (cpu, procfs, resources, resource_figures), whether each trial
delivered the baseline's data (datacheck), why a trial waits: its verdict and diagnosis
(verdict, diagnose), and the results row built from a trial's figures (records: trial_record,
rank_records)."""
