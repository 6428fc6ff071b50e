"""One family of errors that the CLI turns into a one-line message and exit code 1."""


class LoadtuneError(Exception):
    """A problem the user can fix: bad config, missing file, failing factory."""


class ConfigError(LoadtuneError):
    """The config file or an override is invalid."""


class FactoryError(LoadtuneError):
    """A "module:callable" spec cannot be imported, called, or returned the wrong thing."""


class ScriptError(LoadtuneError):
    """The script or module `loadtune watch` is to run cannot be found, or cannot be run as given."""


class ResultsError(LoadtuneError):
    """A results CSV cannot be read or does not match what is asked."""


class OutputExists(LoadtuneError):
    """The output file holds an earlier result, and replacing it was not asked for."""
