"""Every sentence, table and chart the commands print, built here and printed by the CLI: the
answer's sentences (answer), the summary as one typed value of named parts (summary,
summary_parts), the finished sweep as the API returns it (sweep), what `report` and the sweep
show (view, report), tables that fit the width (table), the chart (plot), the outputs of
`compare` and `predict` (compare_text, predict_text), a watched run's report (watched_run) and
`init`'s commented starter config (starter). Offline."""
