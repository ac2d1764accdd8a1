"""A run's typed configuration: the config types, the flag table, config.json both ways,
the run binding, names and labels, and the registry of agents and stages a config may name."""
