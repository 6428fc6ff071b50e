"""The results record and its offline readers (report, compare, plot): one record type, one
column table, one reader. Imports neither the process machinery nor torch, so reading a CSV
starts fast."""
