"""What was observed and kept: a trial's raw per-batch samples as measured (measurement), the
results CSV (record: Record and RankRecord, their columns in CSV order, the one reader and
FORMAT_VERSION; columns: what every column table is built from, the kinds, rounding and groups),
the raw samples and the small JSON files beside it (samples, sidecar), a figure with its 95%
interval, what a sweep noticed beside its figures (findings), a watched run's rows (watched) and
how every command names a config's settings and the line to paste (settings). Offline: no process
machinery, no torch."""
