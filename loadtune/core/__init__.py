"""The words every room shares: the LoadtuneError family (errors), the fixed sets a sweep is
described by and the default tolerance (kinds), how numbers and durations are written (text,
duration), and loadtune's own version (version: the loadtune_version column; the CSV's format
version is record.record.FORMAT_VERSION). Imports nothing else of loadtune."""
