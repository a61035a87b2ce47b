"""``python -m simkit``: see :mod:`simkit.cli`."""

from simkit.cli import main_exit

main_exit()
