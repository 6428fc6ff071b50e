"""The words every room shares: the LoadtuneError family (errors), the fixed sets a sweep is
described by and the default tolerance (kinds), how numbers and durations are written (text,
duration), and the version written in every row. Imports nothing else of loadtune."""
