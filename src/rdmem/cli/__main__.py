"""``python -m rdmem.cli``: the same as the ``rdmem`` command."""

import sys

from . import main

sys.exit(main())
