"""``python -m agents.run``: kept where users type it; the command line is agents.commands.run."""

from agents.commands import cli
from agents.commands.run import main

if __name__ == "__main__":
    cli.exit_with(main())
