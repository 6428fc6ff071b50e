"""`loadtune compare`: result files of one config set against each other (machines, scales,
days), the flags and verdicts between them (files, values), and a model or a sweep checked
against another file (checks). Offline."""
