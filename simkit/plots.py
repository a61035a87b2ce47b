"""Matplotlib figures of run records. Each function returns a ``Figure``; nothing is shown
or saved here (the output writer saves). matplotlib is imported lazily, inside functions.

Layer L5.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from simkit.config import SlaSpec
from simkit.records import RunRecords
from simkit.units import MS_PER_S


def completed_ms(run, column: str) -> np.ndarray:
    """Sorted values (ms) of ``column`` (``ttft_ms``, ``itl_ms``, ``e2e_ms``) over completed
    requests of ``run``: :class:`RunRecords` or a DataFrame of per-request rows."""
    if isinstance(run, RunRecords):
        attr = column.replace("_ms", "_s")
        values = [getattr(r, attr) for r in run.requests if r.status == "completed"]
        return np.sort(np.array([v for v in values if v is not None], dtype=float)) * MS_PER_S
    done = run[run["status"] == "completed"][column].dropna()
    return np.sort(done.to_numpy(dtype=float))


def latency_cdf(runs: Sequence[tuple[str, object]], sla: Optional[SlaSpec] = None):
    """Empirical CDFs of TTFT and per-request ITL (ms) over completed requests.

    ``runs`` is a sequence of ``(label, run)`` where a run is :class:`RunRecords` or a
    DataFrame of per-request rows (as ``Result.requests``); several runs are overlaid. SLA
    bounds, if given, are drawn as vertical dashed lines.
    """
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4), layout="constrained")
    axes = fig.subplots(1, 2)
    metrics = (("ttft_ms", "TTFT (ms)", sla.ttft_ms if sla else None),
               ("itl_ms", "ITL per request (ms)", sla.itl_ms if sla else None))
    for ax, (attr, label, bound) in zip(axes, metrics):
        lo, hi = np.inf, 0.0
        for name, run in runs:
            values = completed_ms(run, attr)
            if len(values):
                ax.step(values, np.arange(1, len(values) + 1) / len(values), where="post", label=name)
                lo, hi = min(lo, values[0]), max(hi, values[-1])
        if bound is not None:
            ax.axvline(bound, color="k", linestyle="--", linewidth=1, label=f"SLA {bound:g} ms")
        ax.set_xlabel(label)
        ax.set_ylabel("fraction of requests")
        ax.set_ylim(0, 1.0)
        ax.grid(True, alpha=0.3)
        if ax.has_data():
            if lo > 0 and hi / lo > 10:  # log axis only when the values span over a decade
                ax.set_xscale("log")
            ax.legend(loc="lower right", fontsize="small")
        else:
            ax.text(0.5, 0.5, "no completed request has this metric", ha="center", va="center",
                    transform=ax.transAxes)
    return fig
