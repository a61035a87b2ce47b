"""Unit conversion constants, used only at the boundaries (loaders, reports).

Simulation time is always seconds. Part of :mod:`simkit.core`: imports nothing from simkit.
"""

S_PER_MS = 1e-3  #: seconds in one millisecond
MS_PER_S = 1e3  #: milliseconds in one second
BYTES_PER_GB = 1e9  #: decimal gigabyte, as link bandwidths are quoted (GB/s)
S_PER_HOUR = 3600.0  #: seconds in one hour (GPU-hours)
