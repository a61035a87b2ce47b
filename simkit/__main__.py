"""``python -m simkit``: see :mod:`simkit.cli`."""

import sys

from simkit.cli import main

sys.exit(main())
