"""``python -m agents.sweep``: kept where users type it; the command line is
agents.commands.sweep."""

from agents.commands import cli
from agents.commands.sweep import main

if __name__ == "__main__":
    cli.exit_with(main())
