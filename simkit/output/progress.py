"""A progress bar for long runs (tqdm): requests ended and simulated time, updated from the
collector's end-of-request notifications (no simulation events are added, so results are
unchanged). Part of :mod:`simkit.output`."""

from __future__ import annotations

import sys


def attach_progress(sim) -> None:
    """Show a tqdm bar for ``sim`` (a built Simulation) on stderr while it runs."""
    from tqdm import tqdm

    # a streamed trace's length is unknown until it is read to the end
    total = len(sim.requests) if sim.requests is not None else getattr(sim.scenario.workload, "num_requests", None)
    bar = tqdm(total=total, unit="req", desc=sim.scenario.name, leave=False,
               mininterval=0.5, dynamic_ncols=True)

    def ended(rid: int, at: float, status: str) -> None:
        bar.update(1)
        if bar.n == bar.total:
            bar.close()
        elif bar.n % 256 == 0:
            bar.set_postfix_str(f"sim {at:,.0f} s", refresh=False)

    sim.collector.listeners.append(ended)


def run_bar(total: int, progress: bool):
    """A tqdm bar on stderr counting a batch's ``total`` runs (hidden unless ``progress``)."""
    from tqdm import tqdm

    return tqdm(total=total, disable=not progress, unit="run", file=sys.stderr, leave=False)
