"""``python -m rdmem``: the same as the ``rdmem`` command (for a virtualenv whose scripts are not on PATH)."""

import sys

from .cli import main

sys.exit(main())
