"""``python -m simkit capacity SCENARIO.yaml [--sla-fraction F] [--set ...] [--trace FILE]
[--tolerance T] [--out DIR] [--force] [--jobs N | --scheduler ADDRESS]``: the highest arrival
rate at which at least a share F of the requests meets the scenario's SLA, by bisection on a
load multiplier, and the bound (TTFT, ITL or E2E) that stops it.

The load multiplier m scales the scenario's open-loop arrivals: a synthetic workload's rate
(``rate_per_s``, every piecewise segment's, a diurnal ``mean_rate_per_s``), a trace's
``arrival_speedup_ratio`` (and ``sessions_per_s`` where set); lengths, sessions' think times and
dependency delays stay. A closed-loop workload (``max_in_flight``) has no offered rate and is
refused. Search: m = 1 first, then doubling (or halving) to bracket the rate between a
multiplier that meets the SLA and one that does not, then bisection (``--jobs`` points a round,
evenly spaced) until the two are within ``--tolerance`` of each other. Results are those of the
scenario's seed, so a rerun gives the same answer. Writes ``capacity.csv`` (every point run),
``capacity.png`` (the SLA fractions against the offered rate) and each point's run folder
under ``points/``. Part of :mod:`simkit.cli`.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Optional, Sequence

from simkit.cli.batch import (OutputFolder, add_batch_arguments, batch_problem, batch_scenario, run_batch,
                              run_points, say)
from simkit.cli.common import _fail, _Parser
from simkit.output.plots import capacity_plot
from simkit.spec import ConfigError, Scenario

#: multipliers tried at most while bracketing (2^12 up or down)
MAX_DOUBLINGS = 12
#: bisection rounds at most
MAX_ROUNDS = 20

#: bound names in summary.json's goodput.fraction_by_bound, as messages name them
BOUND_NAMES = {"ttft_ms": "TTFT", "itl_ms": "ITL", "e2e_ms": "E2E"}


def load_overrides(scenario: Scenario, multiplier: float) -> list[tuple[str, Any]]:
    """Overrides that scale ``scenario``'s offered load by ``multiplier`` (module docstring).

    Raises:
        ConfigError: a closed-loop workload (``max_in_flight``), which has no offered rate.
    """
    workload = scenario.workload
    if workload.kind == "trace":
        if workload.max_in_flight is not None:
            raise ConfigError(["capacity: the workload is closed-loop (max_in_flight): its load follows the "
                               "cluster's pace and has no rate to scale @ $.workload.max_in_flight"])
        out = [("workload.arrival_speedup_ratio", workload.arrival_speedup_ratio * multiplier)]
        if workload.sessions_per_s is not None:
            out.append(("workload.sessions_per_s", workload.sessions_per_s * multiplier))
        return out
    arrival = workload.arrival
    if arrival.kind == "piecewise":
        return [("workload.arrival.segments", [{"duration_s": seg.duration_s, "rate_per_s": seg.rate_per_s * multiplier}
                                               for seg in arrival.segments])]
    if arrival.kind == "diurnal":
        return [("workload.arrival.mean_rate_per_s", arrival.mean_rate_per_s * multiplier)]
    return [("workload.arrival.rate_per_s", arrival.rate_per_s * multiplier)]


def meets(outcome: dict, fraction: float) -> bool:
    """Whether a point's run finished and at least ``fraction`` of its requests met the SLA."""
    summary = outcome.get("summary") or {}
    got = (summary.get("goodput") or {}).get("fraction")
    return outcome["status"] == "ok" and got is not None and got >= fraction


def binding_bound(outcome: dict) -> Optional[str]:
    """The SLA bound the fewest requests of a point meet (TTFT, ITL or E2E), or None."""
    by_bound = ((outcome.get("summary") or {}).get("goodput") or {}).get("fraction_by_bound") or {}
    known = {k: v for k, v in by_bound.items() if v is not None}
    return BOUND_NAMES.get(min(known, key=known.get)) if known else None


class Search:
    """The bracketing and bisection state over load multipliers (module docstring): which
    multipliers to run next (:meth:`next_points`), given the outcomes told so far."""

    def __init__(self, fraction: float, tolerance: float, jobs: int) -> None:
        self.fraction, self.tolerance, self.jobs = fraction, tolerance, max(1, jobs)
        self.results: dict[float, bool] = {}  #: multiplier -> meets the SLA

    def tell(self, multiplier: float, ok: bool) -> None:
        self.results[multiplier] = ok

    def bracket(self) -> tuple[Optional[float], Optional[float]]:
        """(highest multiplier that meets the SLA below the lowest that does not above it, that
        lowest one): lo meets, hi does not, lo < hi; either None until found."""
        failing = sorted(m for m, ok in self.results.items() if not ok)
        passing = sorted(m for m, ok in self.results.items() if ok)
        if not passing:
            return None, failing[0] if failing else None
        lo = passing[-1] if not failing else max((m for m in passing if m < failing[0]), default=None)
        if lo is None:  # every meeting point lies above a failing one: take the lowest failure's
            return None, failing[0]
        hi = min((m for m in failing if m > lo), default=None)
        return lo, hi

    def next_points(self) -> list[float]:
        """The multipliers to run next (empty: the search is over)."""
        if not self.results:  # the scenario's own load, then alternately above and below it
            return [2.0 ** (((i + 1) // 2) * (1 if i % 2 else -1)) for i in range(self.jobs)]
        lo, hi = self.bracket()
        if lo is None:  # nothing meets yet: halve below the lowest tried
            low = min(self.results)
            if low <= 2.0 ** -MAX_DOUBLINGS:
                return []
            return [low / 2.0 ** i for i in range(1, self.jobs + 1)]
        if hi is None:  # everything meets: double above the highest tried
            high = max(self.results)
            if high >= 2.0 ** MAX_DOUBLINGS:
                return []
            return [high * 2.0 ** i for i in range(1, self.jobs + 1)]
        if hi / lo - 1.0 <= self.tolerance:
            return []
        step = (hi - lo) / (self.jobs + 1)
        return [lo + step * i for i in range(1, self.jobs + 1)]


def main(argv: Sequence[str]) -> int:
    p = _Parser(prog="python -m simkit capacity",
                description="The highest arrival rate at which the SLA fraction holds (bisection).")
    p.add_argument("scenario")
    p.add_argument("--tolerance", type=float, default=0.02, metavar="T",
                   help="stop when the highest meeting and lowest failing loads are within T of each other "
                        "(default 0.02)")
    add_batch_arguments(p, "output folder (default: runs/capacity-NAME-YYYYmmdd-HHMMSS)")
    args = p.parse_args(argv)
    problem = batch_problem(args)
    if problem:
        return _fail([problem])
    if not 0.0 < args.tolerance < 1.0:
        return _fail([f"--tolerance {args.tolerance:g}: expected a share in (0, 1)"])
    try:
        common, base = batch_scenario(args, "capacity", "hold")
        load_overrides(base, 1.0)  # a closed loop is refused before anything runs
    except ConfigError as exc:
        return _fail(exc.messages)
    return run_batch(args, base, "capacity", "points", lambda folder: _capacity(args, base, common, folder))


def _capacity(args, base: Scenario, common: list, folder: OutputFolder) -> int:
    import pandas as pd

    scenario_path = os.path.abspath(args.scenario)
    search = Search(args.sla_fraction, args.tolerance, args.jobs if args.scheduler is None else 4)
    outcomes: dict[float, dict] = {}
    for _ in range(MAX_DOUBLINGS + MAX_ROUNDS + 1):
        todo = [m for m in search.next_points() if m not in outcomes]
        if not todo:
            break
        names = [f"points/x{m:.6g}" for m in todo]
        points = [common + load_overrides(base, m) for m in todo]
        for m, outcome in zip(todo, run_points(scenario_path, points, folder.work, names, args.jobs, args.scheduler)):
            outcomes[m] = outcome
            search.tell(m, meets(outcome, args.sla_fraction))
    table = _table(outcomes, args.sla_fraction)
    table.to_csv(os.path.join(folder.work, "capacity.csv"), index=False)
    lo, hi = search.bracket()
    capacity_plot(table, args.sla_fraction, base.name, lo).savefig(os.path.join(folder.work, "capacity.png"), dpi=110,
                                         metadata={"Software": None})
    try:
        folder.commit()
    except OSError as exc:
        say(f"simkit: cannot write the results: {exc.strerror or exc}", err=True)
        return 1
    bounds = ", ".join(f"{BOUND_NAMES[k]} <= {v:g} ms" for k, v in
                       (("ttft_ms", base.sla.ttft_ms), ("itl_ms", base.sla.itl_ms), ("e2e_ms", base.sla.e2e_ms))
                       if v is not None)
    say(f"capacity of {base.name} ({base.mode}) for {args.sla_fraction:.0%} of requests within {bounds}:")
    with pd.option_context("display.width", 100, "display.max_columns", 20):
        for line in table.drop(columns=["error"]).to_string(index=False, na_rep="-",
                                                            float_format=lambda x: f"{x:.3g}").splitlines():
            say(line)
    code = 0
    if lo is None:
        worst = outcomes[min(outcomes)]
        say(f"no load meets the SLA: even at x{min(outcomes):.3g} the scenario's rate "
            f"({_rate(worst)}), {_fraction(worst)} of requests meet it; {binding_bound(worst) or 'the SLA'} "
            "binds", err=True)
        code = 1
    elif hi is None:
        say(f"the SLA holds at every load tried, up to x{lo:.3g} ({_rate(outcomes[lo])}); the cluster was never "
            "the limit", err=True)
    else:
        say(f"capacity: {_rate(outcomes[lo])} (x{lo:.4g} the scenario's load) with {_fraction(outcomes[lo])} of "
            f"requests within the SLA; at {_rate(outcomes[hi])} (x{hi:.4g}) {_fraction(outcomes[hi])}: "
            f"{binding_bound(outcomes[hi]) or 'the SLA'} stops it")
    say(f"wrote {folder.out} (capacity.csv, capacity.png, {len(outcomes)} points)")
    return code


def _rate(outcome: dict) -> str:
    sat = (outcome.get("summary") or {}).get("saturation") or {}
    rate = sat.get("offered_requests_per_s")
    return "-" if rate is None else f"{rate:.4g} requests/s"


def _fraction(outcome: dict) -> str:
    got = ((outcome.get("summary") or {}).get("goodput") or {}).get("fraction")
    return "-" if got is None else f"{got:.1%}"


def _table(outcomes: dict, fraction: float):
    """One row per point, by multiplier."""
    import pandas as pd

    rows = []
    for m in sorted(outcomes):
        outcome = outcomes[m]
        summary = outcome.get("summary") or {}
        good = summary.get("goodput") or {}
        by_bound = good.get("fraction_by_bound") or {}
        rows.append({
            "multiplier": m,
            "offered_requests_per_s": (summary.get("saturation") or {}).get("offered_requests_per_s"),
            "sla_fraction": good.get("fraction"),
            **{f"{BOUND_NAMES[k].lower()}_fraction": v for k, v in by_bound.items()},
            "ttft_p90_ms": (summary.get("ttft_ms") or {}).get("p90"),
            "itl_p50_ms": (summary.get("itl_ms") or {}).get("p50"),
            "meets": meets(outcome, fraction),
            "status": outcome["status"],
            "error": outcome["error"],
        })
    return pd.DataFrame(rows)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
