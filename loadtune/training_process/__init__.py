"""Inside the user's own training process (docs/watch.md): its DataLoaders watched while it
trains, every loader a script iterates (script, hook: `loadtune watch SCRIPT`), one loader
(watched: `loadtune.watch`) or the trainer's (frameworks: the Lightning and Transformers
callbacks); one loader's batches timed (watch, tally), what it tells besides its timings (probe),
its rows in the results format (rows) and the run's lines, file and ranks (run), with the
instruments a trial uses (parts.fetch_notes, measure); and a DataLoader's settings tried and
changed in the real run, each sample handed once (switching), the search (tuner) and the tuned
loader (tune: `loadtune.tune`, `loadtune watch --tune`)."""
