"""Agent graphs and the command line that runs them (`python -m agents.run`)."""
