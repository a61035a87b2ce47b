"""Matplotlib figures of run records. Each function returns a ``Figure``; nothing is shown
or saved here (the output writer saves). matplotlib is imported lazily, inside functions.

Part of :mod:`simkit.output`; the only matplotlib importer.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np

from simkit.spec import SlaSpec
from simkit.core.records import RunRecords
from simkit.output.report import record_columns
from simkit.core.units import MS_PER_S


#: most points drawn per CDF curve
CDF_POINTS = 4000


def plain(text) -> str:
    """User text (a scenario name, a folder, a knob's value) as a plot label shows it
    literally: control characters escaped (fonts have no glyph for them) and ``$`` escaped
    (matplotlib reads ``$...$`` as mathtext, and a bad formula fails the whole figure)."""
    text = str(text)
    text = "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)
    return text.replace("$", r"\$")


def completed_ms(run, column: str) -> np.ndarray:
    """Sorted values (ms) of ``column`` (``ttft_ms``, ``itl_ms``, ``e2e_ms``) over completed
    requests of ``run``: :class:`RunRecords` or a DataFrame of per-request rows."""
    if isinstance(run, RunRecords):
        cols = record_columns(run.requests, ("rid", "status", "arrived_at", "first_token_at", "last_token_at",
                                             "finished_at", "output_length"))
        done = cols["status"] == "completed"
        first = cols["first_token_at"][done]
        if column == "ttft_ms":
            values = first - cols["arrived_at"][done]
        elif column == "e2e_ms":
            values = cols["last_token_at"][done] - cols["arrived_at"][done]
        else:  # per-request ITL, defined from two tokens
            n = cols["output_length"][done]
            multi = n > 1
            values = (cols["last_token_at"][done][multi] - first[multi]) / (n[multi] - 1)
        return np.sort(values[~np.isnan(values)]) * MS_PER_S
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
                n = len(values)
                # at most CDF_POINTS steps: the same picture at any print size, and a million
                # requests do not make a million-vertex path
                index = np.unique(np.linspace(0, n - 1, min(n, CDF_POINTS)).round().astype(np.int64))
                ax.step(values[index], (index + 1) / n, where="post", label=plain(name))
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


_KIND_COLOURS = {"prefill": "tab:blue", "decode": "tab:green", "mixed": "tab:orange"}


def _kind(p) -> str:
    if p.prefill_tokens and p.decode_requests:
        return "mixed"
    return "prefill" if p.prefill_tokens else "decode"


def _workers(pass_log) -> list[tuple[str, int]]:
    return list(dict.fromkeys((p.pool, p.worker) for p in pass_log))


def pass_timeline(records: RunRecords, until_s: Optional[float] = None):
    """A Gantt chart of forward passes: one row per worker, a bar per pass coloured by kind
    (prefill only, decode only, mixed), up to ``until_s``. Needs ``record_passes``.

    Raises:
        ValueError: the run did not record passes.
    """
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    if records.pass_log is None:
        raise ValueError("this run has no pass records: simulate with record_passes=True")
    workers = _workers(records.pass_log)
    fig = Figure(figsize=(10, 0.6 * len(workers) + 1.5), layout="constrained")
    ax = fig.subplots()
    for row, (pool, worker) in enumerate(workers):
        bars = {"prefill": [], "decode": [], "mixed": []}
        for p in records.pass_log:
            if (p.pool, p.worker) == (pool, worker) and (until_s is None or p.start_at <= until_s):
                bars[_kind(p)].append((p.start_at, p.end_at - p.start_at))
        for kind, spans in bars.items():
            if spans:
                ax.broken_barh(spans, (row - 0.4, 0.8), facecolors=_KIND_COLOURS[kind], edgecolor="white",
                               linewidth=0.3)
    ax.set_yticks(range(len(workers)), [f"{pool}/{w}" for pool, w in workers])
    ax.set_xlabel("simulated time (s)")
    ax.invert_yaxis()
    shown = {_kind(p) for p in records.pass_log if until_s is None or p.start_at <= until_s}
    ax.legend(handles=[Patch(color=c, label=k) for k, c in _KIND_COLOURS.items() if k in shown],
              loc="upper right", fontsize="small", ncols=3)
    return fig


def worker_series(records: RunRecords):
    """Time series per worker: KV blocks in use and requests in the batch, from the pass
    records (and a host KV tier's blocks, when there is one, and its storage tier's); and the router-to-admission queue depth (requests arrived but not yet admitted
    by a prompt worker), from the request records. Needs ``record_passes``.

    Raises:
        ValueError: the run did not record passes.
    """
    from matplotlib.figure import Figure

    if records.pass_log is None:
        raise ValueError("this run has no pass records: simulate with record_passes=True")
    host = any(p.host_blocks is not None for p in records.pass_log)
    fig = Figure(figsize=(10, 9 if host else 7), layout="constrained")
    axes = fig.subplots(4 if host else 3, 1, sharex=True)
    ax_kv, ax_batch, ax_queue = axes[0], axes[1], axes[-1]
    for pool, worker in _workers(records.pass_log):
        mine = [p for p in records.pass_log if (p.pool, p.worker) == (pool, worker)]
        t = [p.start_at for p in mine]
        ax_kv.step(t, [p.kv_blocks for p in mine], where="post", label=f"{pool}/{worker}")
        if host and mine[0].host_blocks is not None:
            axes[2].step(t, [p.host_blocks for p in mine], where="post", label=f"{pool}/{worker}")
        if host and mine[0].storage_blocks is not None:  # the storage tier behind it, dashed
            axes[2].step(t, [p.storage_blocks for p in mine], where="post", linestyle="--",
                         label=f"{pool}/{worker} storage")
        ax_batch.step(t, [p.decode_requests + (1 if p.prefill_tokens else 0) for p in mine], where="post",
                      label=f"{pool}/{worker}")
    # at equal times the arrival counts before the admission (sort key -change: +1 first)
    events = sorted([(r.arrived_at, 1) for r in records.requests if r.arrived_at is not None]
                    + [(r.first_admitted_at, -1) for r in records.requests if r.first_admitted_at is not None],
                    key=lambda e: (e[0], -e[1]))
    depth, xs, ys = 0, [], []
    for at, change in events:
        depth += change
        xs.append(at)
        ys.append(depth)
    ax_queue.step(xs, ys, where="post", color="k")
    ax_kv.set_ylabel("KV blocks in use")
    ax_batch.set_ylabel("requests in pass")
    ax_queue.set_ylabel("requests arrived,\nnot yet admitted")
    ax_queue.set_xlabel("simulated time (s)")
    if host:
        axes[2].set_ylabel("host KV blocks\n(held or being stored;\nstorage dashed)")
    for ax in axes:
        ax.grid(True, alpha=0.3)
    if len(_workers(records.pass_log)) <= 12:
        ax_kv.legend(fontsize="small", ncols=4)
    return fig


def _rolling_p90(times: np.ndarray, values: np.ndarray, window_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Nearest-rank p90 of ``values`` in consecutive windows of ``window_s`` seconds of
    ``times`` (ascending), placed at each window's middle."""
    if not len(times):
        return times, values
    edges = np.arange(times[0], times[-1] + window_s, window_s)
    xs, ys = [], []
    for lo in edges:
        chunk = np.sort(values[(times >= lo) & (times < lo + window_s)])
        if len(chunk):
            xs.append(lo + window_s / 2)
            ys.append(chunk[min(max(int(np.ceil(0.9 * len(chunk))), 1), len(chunk)) - 1])
    return np.array(xs), np.array(ys)


def planner_series(records: RunRecords, sla: Optional[SlaSpec] = None):
    """The planner at work, over simulated time: workers per pool (active, solid; provisioned
    = starting + active + draining, dashed), the prompt tokens queued on each prompt pool's
    workers and the requests waiting in the router (dotted), and each pool's mean KV usage at
    each planner tick, and each request's TTFT and ITL at its arrival time (dots; the line is
    the p90 per planner interval; dashed: the SLA). Needs a run with a planner.

    Raises:
        ValueError: the run had no planner.
    """
    from matplotlib.figure import Figure

    if records.worker_counts is None or records.pool_samples is None:
        raise ValueError("this run has no planner time series (the scenario has no 'planner')")
    fig = Figure(figsize=(10, 11), layout="constrained")
    ax_w, ax_q, ax_kv, ax_ttft, ax_itl = fig.subplots(5, 1, sharex=True)
    ax_q2 = ax_q.twinx()
    end = records.end_at
    pools = list(dict.fromkeys(c.pool for c in records.worker_counts))
    colours = {pool: f"C{i}" for i, pool in enumerate(pools)}
    for pool in pools:
        rows = [c for c in records.worker_counts if c.pool == pool]
        t = [c.at for c in rows] + [end]
        active = [c.active for c in rows]
        prov = [c.starting + c.active + c.draining for c in rows]
        ax_w.step(t, active + active[-1:], where="post", color=colours[pool], label=f"{pool} active")
        ax_w.step(t, prov + prov[-1:], where="post", color=colours[pool], linestyle="--", linewidth=1,
                  label=f"{pool} provisioned")
        samples = [p for p in records.pool_samples if p.pool == pool]
        ts = [p.at for p in samples]
        if pool != "decode":
            ax_q.plot(ts, [p.queued_prefill_tokens for p in samples], color=colours[pool], marker=".",
                      label=f"{pool}: on workers")
        ax_q2.plot(ts, [p.router_queue for p in samples], color=colours[pool], linestyle=":",
                   label=f"{pool}: requests in router")
        ax_kv.plot(ts, [100 * p.kv_usage for p in samples], color=colours[pool], marker=".", label=pool)
    done = [r for r in records.requests if r.status == "completed"]
    ticks = sorted({p.at for p in records.pool_samples})
    interval = ticks[1] - ticks[0] if len(ticks) > 1 else max(end, 1.0)
    for ax, attr, bound, label in ((ax_ttft, "ttft_s", sla.ttft_ms if sla else None, "TTFT (ms)"),
                                   (ax_itl, "itl_s", sla.itl_ms if sla else None, "ITL per request (ms)")):
        pts = sorted((r.arrived_at, getattr(r, attr) * MS_PER_S) for r in done if getattr(r, attr) is not None)
        if pts:
            t, v = np.array(pts).T
            ax.scatter(t, v, s=2, alpha=0.3, color="tab:gray", rasterized=True)
            xs, ys = _rolling_p90(t, v, interval)
            ax.plot(xs, ys, color="k", linewidth=1.2, label="p90 per planner interval")
            if v.min() > 0 and v.max() / v.min() > 100:
                ax.set_yscale("log")
        if bound is not None:
            ax.axhline(bound, color="tab:red", linestyle="--", linewidth=1, label=f"SLA {bound:g} ms")
        ax.set_ylabel(label)
        if ax.has_data():
            ax.legend(loc="upper right", fontsize="small")
    ax_w.set_ylabel("workers")
    ax_w.legend(loc="upper left", fontsize="small", ncols=2)
    ax_q.set_ylabel("prompt tokens queued")
    ax_q2.set_ylabel("waiting in router (dotted)")
    ax_q2.set_ylim(bottom=0, top=max(ax_q2.get_ylim()[1], 1))  # a count: never below 0
    ax_q.legend(loc="upper left", fontsize="small")
    ax_kv.set_ylabel("KV usage (%)")
    ax_kv.legend(loc="upper left", fontsize="small")
    ax_itl.set_xlabel("simulated time (s)")
    for ax in (ax_w, ax_q, ax_kv, ax_ttft, ax_itl):
        ax.grid(True, alpha=0.3)
    return fig


def pareto(table, knobs: Sequence[str], sla_fraction: float = 0.9, title: Optional[str] = None):
    """Throughput against interactivity, one point per finished run: output tokens/s per GPU
    (y) against output tokens/s per user, 1000 / ITL p50 in ms (x), the trade-off serving
    benchmarks plot (InferenceMAX, NVIDIA's). Runs where at least ``sla_fraction`` of the
    requests meet the SLA (``goodput_fraction``) are filled circles, the others grey crosses;
    the best trade-off line joins only SLA-meeting runs that no other SLA-meeting run beats on
    both axes, and only those are labelled with their knob values (labels shifted apart so
    they never overlap). Without an SLA every finished run counts as meeting it. ``table`` is
    a sweep table (:mod:`simkit.cli.sweep`) or a recommend table with the same columns."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 5), layout="constrained")
    ax = fig.subplots()
    ok = table[(table["status"] == "ok") & table["itl_p50_ms"].notna() & (table["itl_p50_ms"] > 0)
               & table["output_tokens_per_s_per_gpu"].notna()]
    xs = 1000.0 / ok["itl_p50_ms"].to_numpy(float)
    ys = ok["output_tokens_per_s_per_gpu"].to_numpy(float)
    goodput = ok["goodput_fraction"].to_numpy(float) if "goodput_fraction" in ok else np.full(len(ok), np.nan)
    meets = np.where(np.isnan(goodput), True, goodput >= sla_fraction)
    if (~meets).any():
        ax.scatter(xs[~meets], ys[~meets], marker="x", color="0.6",
                   label=f"below the SLA (< {sla_fraction:.0%} of requests)")
    if meets.any():
        ax.scatter(xs[meets], ys[meets], color="tab:green", edgecolors="k", linewidths=0.5,
                   label="meets the SLA" if np.isfinite(goodput).any() else "finished runs")
    front, best = [], -np.inf  # SLA-meeting runs, by tokens/s per user, best first
    for j in sorted(np.flatnonzero(meets), key=lambda j: (-xs[j], -ys[j])):
        if ys[j] > best:
            front.append(j)
            best = ys[j]
    if front:
        ax.plot(xs[front], ys[front], color="tab:orange", linewidth=1, label="best trade-off (meets the SLA)")
    rows = list(ok.iterrows())
    _labels(fig, ax, [(xs[j], ys[j], plain(", ".join(f"{'.'.join(k.split('.')[-2:])}={rows[j][1][k]}"
                                                       for k in knobs))) for j in front])
    if len(xs) and xs.min() > 0 and xs.max() / xs.min() > 10:
        ax.set_xscale("log")
    ax.set_xlabel("output tokens/s per user (1000 / ITL p50 ms)")
    ax.set_ylabel("output tokens/s per GPU")
    ax.grid(True, alpha=0.3)
    if len(ok):
        ax.legend(loc="best", fontsize="small")
    else:
        ax.text(0.5, 0.5, "no run finished", ha="center", va="center", transform=ax.transAxes)
    if title:
        ax.set_title(plain(title), fontsize="medium")
    return fig


def _labels(fig, ax, points: Sequence[tuple[float, float, str]]) -> None:
    """Annotate ``points`` (x, y, text), nudging each label up past the ones already placed
    whose boxes it would overlap (in display space, after a draw); a label that would run past
    the axes' right edge is written to the left of its point."""
    if not points:
        return
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)  # (a bare Figure's canvas cannot measure text)
    canvas.draw()  # the axes limits and transforms the labels are measured in
    renderer = canvas.get_renderer()
    placed = []
    right = ax.get_window_extent(renderer).x1
    for x, y, text in sorted(points, key=lambda p: (p[1], p[0])):
        note = ax.annotate(text, (x, y), fontsize=7, xytext=(4, 4), textcoords="offset points")
        note.set_in_layout(False)  # (a label nudged far up must not squeeze the axes)
        box = note.get_window_extent(renderer)
        dx = 4
        if box.x1 > right:  # clipped at the right edge: the label goes left of its point
            dx = -4
            note.set_position((dx, 4))
            note.set_horizontalalignment("right")
            box = note.get_window_extent(renderer)
        shift = 0.0
        for _ in range(len(placed) + 1):
            moved = box.translated(0, shift)
            hit = next((b for b in placed if moved.overlaps(b)), None)
            if hit is None:
                break
            shift += hit.y1 - moved.y0 + 1
        if shift:
            note.set_position((dx, 4 + shift * 72.0 / fig.dpi))
        placed.append(box.translated(0, shift))


def capacity_plot(table, sla_fraction: float, name: str, capacity_multiplier: Optional[float]):
    """The SLA fraction (and each bound's alone) against the offered rate, the target share
    dashed and the capacity found marked: a matplotlib Figure.

    ``table``: capacity's table (columns ``multiplier``, ``offered_requests_per_s``,
    ``sla_fraction`` and ``ttft_fraction``/``itl_fraction``/``e2e_fraction`` where present);
    ``capacity_multiplier``: the row found (None when none meets ``sla_fraction``)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.5), layout="constrained")
    ax = fig.subplots()
    rate = table["offered_requests_per_s"].astype(float)
    ax.plot(rate, table["sla_fraction"].astype(float), marker="o", color="tab:green", label="every bound")
    for column, colour in (("ttft_fraction", "tab:blue"), ("itl_fraction", "tab:orange"), ("e2e_fraction", "tab:red")):
        if column in table and table[column].notna().any():
            ax.plot(rate, table[column].astype(float), marker=".", linestyle=":", color=colour,
                    label=column.split("_")[0].upper() + " alone")
    ax.axhline(sla_fraction, color="k", linestyle="--", linewidth=1, label=f"target {sla_fraction:.0%}")
    if capacity_multiplier is not None:
        found = table.loc[table["multiplier"] == capacity_multiplier, "offered_requests_per_s"].astype(float)
        if len(found) and math.isfinite(found.iloc[0]):
            ax.axvline(found.iloc[0], color="tab:green", linestyle="--", linewidth=1,
                       label=f"capacity {found.iloc[0]:.3g} requests/s")
    ax.set_xlabel("offered load (requests/s)")
    ax.set_ylabel("fraction of requests within the SLA")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small", loc="lower left")
    ax.set_title(plain(f"{name}: capacity for {sla_fraction:.0%} within the SLA"), fontsize="medium")
    return fig
