"""What only the tests share: the repository root and the interpreter.

Servers, configs, tool fixtures and the fake upstream are in ``tiergate_testing`` (shared
with bench/).
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
