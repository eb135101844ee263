"""What a script run as a file (`python scripts/NAME.py`) does first, by importing this: the repository's packages
become importable from a checkout without `pip install -e .`, and another Python than the project's is one line
naming .venv/bin/python, not a traceback (common/environment.py). A script imported as a module (`scripts.NAME`, by
the tests and scripts/regenerate.py) skips it: whoever imports it has the repository on the path already."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common.environment import require_environment  # noqa: E402

require_environment()
