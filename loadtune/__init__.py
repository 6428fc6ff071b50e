"""loadtune: measure which DataLoader settings keep the accelerator fed.

The command line is `loadtune`; from Python (a notebook, a script):

    import loadtune
    result = loadtune.sweep("my.yaml")            # or a dict of the same keys
    result.recommended, result.loader_kwargs, result.frame
    loadtune.compare("small.csv", "large.csv").verdict
    loadtune.predict("small.csv", cores=16, ranks=4).recommended   # another machine
"""

from typing import Any

from loadtune.version import __version__  # noqa: F401 - part of the package's interface


def sweep(config: Any, **options: Any) -> Any:
    """Run a sweep as `loadtune sweep` does; see loadtune.api.sweep."""
    from loadtune.api import sweep as run

    return run(config, **options)


def compare(*csvs: Any, force: bool = False) -> Any:
    """Compare results CSVs as `loadtune compare` does; see loadtune.api.compare."""
    from loadtune.api import compare as run

    return run(*csvs, force=force)


def predict(csv: Any, **target: Any) -> Any:
    """What another machine should use, as `loadtune predict` says; see loadtune.api.predict."""
    from loadtune.api import predict as run

    return run(csv, **target)
