"""Data and helpers that every other package may import: :mod:`~simkit.core.request` (one
request of a workload: arrival, lengths, prompt block identities, session), :mod:`~simkit.core.records`
(the flat, frozen rows a run produces: per request, per pass, worker counts and planner
samples, gathered in ``RunRecords``), :mod:`~simkit.core.units` (unit constants, used at the
boundaries) and :mod:`~simkit.core.rng` (named random streams of the scenario seed). Imports
nothing from the rest of simkit and no library but attrs and the standard library; never simpy.
"""
