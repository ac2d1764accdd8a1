"""The command lines: every ``python -m agents.*`` entry point and the one error ladder."""
