"""What was observed and kept: a trial's raw per-batch samples as measured (measurement), the
results CSV (record: one record type, one column table in columns, one reader, a format version),
the raw samples and the small JSON files beside it (samples, sidecar), a figure with its 95%
interval, what a sweep noticed beside its figures (findings), a watched run's rows (watched) and
how every command names a config's settings and the line to paste (settings). Offline: no process
machinery, no torch."""
