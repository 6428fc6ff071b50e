"""The user's parts, built from the config's specs as every process builds them: the factories
(factory: "pkg.module:callable", "path/to/file.py:callable"), the DataLoader and its keywords
(loader), the training step (steps), the device and moving batches onto it (device), what the
loading workers note around each fetch (fetch_notes), and a failure as one line naming the part
that raised it (failures)."""
