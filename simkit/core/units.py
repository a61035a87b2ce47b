"""Unit conversion constants, used only at the boundaries (loaders, reports).

Simulation time is always seconds. Part of :mod:`simkit.core`: imports nothing from simkit.
"""

S_PER_MS = 1e-3  #: seconds in one millisecond
MS_PER_S = 1e3  #: milliseconds in one second
BYTES_PER_GB = 1e9  #: decimal gigabyte, as link bandwidths are quoted (GB/s)
S_PER_HOUR = 3600.0  #: seconds in one hour (GPU-hours)

#: the latest simulated time (s, about 31.7 years) any input may lead to: below it float64
#: still resolves 1 us (its spacing at 1e9 is 1.2e-7 s). Every time-like field, after every
#: scaling (speedups, rates, ms to s), is checked against it, and a run whose clock would pass
#: it stops there (``stop_reason`` ``time_limit``)
MAX_SIM_TIME_S = 1e9
MAX_SIM_TIME_MS = MAX_SIM_TIME_S * MS_PER_S  #: the same limit in milliseconds
#: the limit as messages name it
MAX_SIM_TIME_TEXT = "1e9 s (about 31 years)"
