"""``python -m agent_sessions``: the command line."""

import sys

from .cli import main

sys.exit(main())
