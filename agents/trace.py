"""``python -m agents.trace``: kept where users type it; the command line is
agents.commands.trace."""

import sys

from agents.commands.trace import main

if __name__ == "__main__":
    sys.exit(main())
