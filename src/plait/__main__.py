"""``python -m plait``."""

import sys

from plait.cli import run

sys.exit(run())
