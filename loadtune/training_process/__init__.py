"""Inside the user's own training process: its DataLoaders watched while it trains (`loadtune.watch`,
`loadtune watch SCRIPT`, the Lightning and Transformers callbacks), with the trial process's
instrumentation, and its rows written in the results format (docs/watch.md)."""
