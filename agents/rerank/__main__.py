"""``python -m agents.rerank``: kept where users type it; the command line is
agents.commands.rerank."""

from agents.commands import cli
from agents.commands.rerank import main

if __name__ == "__main__":
    cli.exit_with(main())
