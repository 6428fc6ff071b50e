"""What the user asks, before anything is measured: the config file read, overridden and
validated (config, config_yaml), the sweep's options, the trials (one DataLoader config each,
frozen: trials) and the plan of which to measure (plan). Nothing here holds a measurement."""
