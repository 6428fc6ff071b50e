"""What the user asks, before anything is measured: the config file read, overridden and
validated (config, config_yaml), with the measure section's settings and defaults
(config.MeasureSpec: warm-up batches and per-worker warm-up, counted batches, repeats), the
sweep's options, the trials (one DataLoader config each, frozen: trials) and the plan of which to
measure (plan). Nothing here holds a measurement."""
