"""Summaries of a run: latency percentiles, throughput, goodput, worker-seconds.

Definitions (REFERENCE.md section 7): TTFT = first token - arrival; per-request ITL =
(last token - first token) / (tokens - 1), undefined below 2 tokens; E2E = completion -
arrival; queue = first admission - arrival. Percentiles are nearest-rank (the k-th smallest,
k = ceil(q/100 * n)), over completed requests, as in the reference. Throughput divides by the
duration, the time of the last completion. Goodput counts completed requests that meet every
SLA bound given.

Part of :mod:`simkit.output`: imports records and specs only; never sees a live environment.
"""

from __future__ import annotations

import math
from typing import Any, Iterator, Optional, Sequence

import numpy as np

from simkit.spec import SlaSpec
from simkit.core.records import RunRecords
from simkit.core.units import MS_PER_S, S_PER_HOUR

__all__ = ["iter_request_rows", "nearest_rank", "record_columns", "request_row", "request_rows", "summarize",
           "render_text"]

PERCENTILES = (50, 90, 99)


def _ms(value: Optional[float]) -> Optional[float]:
    """Seconds to ms; None (JSON null) for a missing or non-finite value."""
    if value is None:
        return None
    ms = value * MS_PER_S
    return ms if math.isfinite(ms) else None


def request_row(r) -> dict[str, Any]:
    """The JSON-ready row of one RequestRecord (times in ms since the earliest arrival)."""
    return {
        "id": r.rid,
        "arrival_ms": _ms(r.arrived_at),
        "input_length": r.input_length,
        "output_length": r.output_length,
        "requested_output_length": r.requested_output_length,
        "ttft_ms": _ms(r.ttft_s),
        "itl_ms": _ms(r.itl_s),
        "e2e_ms": _ms(r.e2e_s),
        "queue_ms": _ms(r.queue_s),
        "router_queue_ms": _ms(r.router_queue_s),
        "transfer_ms": _ms(r.transfer_s),
        "decode_queue_ms": _ms(r.decode_queue_s),
        "status": r.status,
        "cached_tokens": r.cached_tokens,
        "host_cached_tokens": r.host_cached_tokens,
        "prefill_worker": r.prefill_worker,
        "decode_worker": r.decode_worker,
        "priority": r.priority,
        "verify_rounds": r.verify_rounds,
        "accepted_drafts": r.accepted_drafts,
        "accept_length": r.accept_length,
        **_component_ms(r.ttft_components),
    }


def _component_ms(parts: Optional[dict]) -> dict:
    """``ttft_<part>_ms`` columns of a request row (null where the part does not apply)."""
    if parts is None:
        return {f"ttft_{name}_ms": None for name in TTFT_COMPONENTS}
    return {f"ttft_{name}_ms": _ms(value) for name, value in parts.items()}


#: the column types of request rows (JSON null = a missing value): ints, floats (ms) and status
ROW_INT_COLUMNS = ("id", "input_length", "output_length", "requested_output_length", "cached_tokens",
                   "host_cached_tokens", "verify_rounds",
                   "accepted_drafts", "prefill_worker", "decode_worker")


def request_rows(records: RunRecords) -> list[dict[str, Any]]:
    """One JSON-ready dict per request (times in ms since the earliest arrival)."""
    return [request_row(r) for r in records.requests]


def iter_request_rows(records: RunRecords, batch_rows: int = 8192) -> Iterator[list[dict[str, Any]]]:
    """:func:`request_rows` in lists of at most ``batch_rows`` (a spooled run is read back a
    batch at a time)."""
    batch = []
    for r in records.requests:
        batch.append(request_row(r))
        if len(batch) >= batch_rows:
            yield batch
            batch = []
    if batch:
        yield batch


def nearest_rank(sorted_values: Sequence[float], q: float) -> float:
    """The nearest-rank q-th percentile of ascending ``sorted_values`` (non-empty)."""
    n = len(sorted_values)
    k = min(max(math.ceil(q / 100.0 * n), 1), n)
    return float(sorted_values[k - 1])


def _stats_ms(values_s) -> Optional[dict]:
    if len(values_s) == 0:
        return None
    arr = np.sort(np.asarray(values_s, dtype=float)) * MS_PER_S
    out = {"mean": float(arr.mean())}
    for q in PERCENTILES:
        out[f"p{q}"] = nearest_rank(arr, q)
    return out


_SUMMARY_FIELDS = ("rid", "status", "arrived_at", "dispatched_at", "first_admitted_at", "first_token_at",
                   "last_token_at", "finished_at", "prefilled_at", "handed_off_at", "decode_admitted_at",
                   "output_length", "frontend_s", "first_token_overhead_s", "restore_s")


def record_columns(requests, names: Sequence[str] = _SUMMARY_FIELDS) -> dict[str, np.ndarray]:
    """Columns of request records ordered by ``rid``: floats with NaN for a missing time, ints,
    ``status`` as strings. ``requests`` is a sequence of RequestRecord or a spool (read a column
    at a time, so a streamed run's records never sit in memory as objects)."""
    if hasattr(requests, "columns"):
        cols = requests.columns(tuple(names))
        order = np.argsort(cols["rid"], kind="stable")
        return {name: col[order] for name, col in cols.items()}
    out = {}
    for name in names:
        values = [getattr(r, name) for r in requests]
        if name == "status":
            out[name] = np.asarray(values, dtype=object)
        elif name in ("rid", "output_length"):
            out[name] = np.asarray(values, dtype=np.int64)
        else:
            out[name] = np.asarray(values, dtype=float)
    return out


def _gap(cols: dict, start: str, end: str, rows: np.ndarray) -> np.ndarray:
    """``end - start`` in seconds for the selected rows where both are known, by rid."""
    gap = cols[end][rows] - cols[start][rows]
    return gap[~np.isnan(gap)]


def _known(cols: dict, name: str, start: str, end: str, rows: np.ndarray) -> np.ndarray:
    """Column ``name`` for the selected rows where ``start`` and ``end`` are both known (the
    rows :func:`_gap` keeps)."""
    both = ~np.isnan(cols[end][rows] - cols[start][rows])
    return cols[name][rows][both]


def _kv_offload(records) -> Optional[dict]:
    """The summary's ``kv_offload``: prefix-cache hits by tier (tokens, and as a fraction of the
    prompt tokens looked up; a storage tier's hits reach the GPU through the host, counted there
    too, and apart as ``storage_hit_tokens``),
    blocks stored and restored, GB copied each way, and with a storage tier the blocks staged
    from it and written to it, and the restores abandoned for recompute (``bypassed_restores``:
    requests that stopped staging from it after
    :data:`~simkit.engine.offload.RESTORE_ROUNDS_BEFORE_BYPASS` rounds of a stalled worker).
    None without a host tier."""
    k = records.kv_offload
    if k is None:
        return None
    looked = records.prompt_lookup_tokens
    host = k["host_hit_tokens"]
    gpu = records.prompt_hit_tokens - host
    out = {"gpu_hit_tokens": gpu, "host_hit_tokens": host,
           "gpu_hit_ratio": gpu / looked if looked else 0.0, "host_hit_ratio": host / looked if looked else 0.0,
           "stored_blocks": k["stored_blocks"], "restored_blocks": k["restored_blocks"],
           "d2h_gb": k["d2h_bytes"] / 1e9, "h2d_gb": k["h2d_bytes"] / 1e9}
    if "staged_blocks" in k:  # a storage tier: blocks staged from it to host, written to it
        out.update(staged_blocks=k["staged_blocks"], written_blocks=k["written_blocks"],
                   storage_read_gb=k["storage_read_bytes"] / 1e9, storage_write_gb=k["storage_write_bytes"] / 1e9,
                   bypassed_restores=k.get("bypassed_restores", 0))
        storage = k.get("storage_hit_tokens", 0)  # (of the host's: they reach the GPU through it)
        out.update(storage_hit_tokens=storage, storage_hit_ratio=storage / looked if looked else 0.0)
    return out


#: the parts of a TTFT, in order (:attr:`simkit.core.records.RequestRecord.ttft_components`)
TTFT_COMPONENTS = ("frontend", "router_queue", "engine_queue", "restore", "prefill", "transfer", "decode_queue",
                   "first_decode", "first_token_overhead")


def _ttft_components(cols: dict, done: np.ndarray) -> Optional[dict]:
    """The summary's ``ttft_components``: over the completed requests with a first token, per
    part of their TTFT (:data:`TTFT_COMPONENTS`; the disaggregated ones only there) its mean,
    p50, p90 and p99 in ms and ``share``, its mean over the mean TTFT (the shares sum to 1).
    None without such a request."""
    rows = done[~np.isnan(cols["first_token_at"][done]) & ~np.isnan(cols["first_admitted_at"][done])]
    if not len(rows):
        return None
    c = {k: v[rows] for k, v in cols.items()}
    engine_first = c["first_token_at"] - c["first_token_overhead_s"]
    disagg = ~np.isnan(c["prefilled_at"]) & ~np.isnan(c["decode_admitted_at"])
    parts = {"frontend": c["frontend_s"], "router_queue": c["dispatched_at"] - c["arrived_at"] - c["frontend_s"],
             "engine_queue": c["first_admitted_at"] - c["dispatched_at"] - c["restore_s"]}
    if (c["restore_s"] > 0).any():
        parts["restore"] = c["restore_s"]
    parts["prefill"] = np.where(disagg, c["prefilled_at"], engine_first) - c["first_admitted_at"]
    if disagg.any():
        parts["transfer"] = np.where(disagg, c["handed_off_at"] - c["prefilled_at"], 0.0)
        parts["decode_queue"] = np.where(disagg, c["decode_admitted_at"] - c["handed_off_at"], 0.0)
        parts["first_decode"] = np.where(disagg, engine_first - c["decode_admitted_at"], 0.0)
    parts["first_token_overhead"] = c["first_token_overhead_s"]
    ttft = float(np.mean(c["first_token_at"] - c["arrived_at"]))
    out = {}
    for name, values in parts.items():
        out[name] = dict(_stats_ms(values), share=float(np.mean(values)) / ttft if ttft > 0 else None)
    return out


def _speculation(counts: Optional[dict]) -> Optional[dict]:
    """The summary's ``speculative`` section (None without verify rounds): ``accept_length``
    (mean tokens per verify round before cutting to the output left: 1 + accepted drafts /
    rounds, counted over decode passes only), ``tokens_per_round`` (after the cut), per draft
    position ``acceptance_by_position`` (accepted / tried, draft i tried when drafts before it
    were accepted), and ``verify_rounds``."""
    if not counts or not counts["rounds"]:
        return None
    rounds = counts["rounds"]
    return {"verify_rounds": rounds, "accept_length": 1.0 + counts["accepted"] / rounds,
            "tokens_per_round": counts["tokens"] / rounds,
            "acceptance_by_position": [a / t if t else None for a, t in zip(counts["by_position"], counts["tried"])]}


def summarize(records: RunRecords, sla: Optional[SlaSpec] = None) -> dict[str, Any]:
    """A JSON-ready summary of ``records``.

    Keys: ``requests`` {total, completed, rejected, incomplete, not_arrived (incomplete requests
    never released before a time cap)}; ``ttft_ms``, ``itl_ms``, ``e2e_ms``, ``queue_ms``
    (arrival to first admission) and ``router_queue_ms`` (arrival to dispatch, the part spent
    in the router queue), and, disaggregated, ``transfer_ms`` (prefill end to KV arrival on the
    decode side, link channel wait included) and ``decode_queue_ms`` (KV arrival to decode
    admission) {mean, p50, p90, p99} (None when no request qualifies);
    ``itl_ms_token_weighted``; ``throughput`` {requests_per_s, output_tokens_per_s};
    ``duration_s``; ``worker_seconds`` per pool (provisioned workers, starting + active +
    draining, integrated over the run, to its end); ``gpu_hours`` per pool (worker-seconds x
    tensor_parallel_size x data_parallel_size / 3600); with a planner, ``workers`` per pool
    {min_active, max_active, mean_provisioned}; ``prefix_cache_hit_ratio`` (prompt tokens
    found cached / prompt tokens looked up, counting prompt admissions only) and
    ``prefix_cache_hit_tokens`` (the tokens found cached); ``passes`` per
    pool; ``saturation`` (whether the cluster keeps up with the offered load, see
    :func:`_saturation`); ``stop`` {reason, detail, incomplete}: why the run ended and whether it is partial; and
    ``goodput`` {requests_per_s, output_tokens_per_s, fraction, fraction_by_bound} when
    ``sla`` sets a bound: the completed requests that meet every bound (TTFT, the request's
    mean ITL, E2E), and per bound the fraction that meets it alone; fractions are of the
    requests that arrived.

    Works on columns (:func:`record_columns`), so it costs a few arrays per request however
    the records are held.
    """
    cols = record_columns(records.requests)
    status = cols["status"]
    done = np.flatnonzero(status == "completed")
    n_total = len(status)
    counts = {
        "total": n_total,
        "completed": len(done),
        "rejected": int(np.count_nonzero(status == "rejected")),
        "incomplete": int(np.count_nonzero(status == "incomplete")),
        # of the incomplete, those never released before the run stopped (a time cap)
        "not_arrived": int(np.count_nonzero(np.isnan(cols["arrived_at"]))),
    }
    duration_s = float(cols["finished_at"][done].max()) if len(done) else 0.0
    n_out = cols["output_length"][done]
    out_tokens = int(n_out.sum())
    multi = done[n_out > 1]  # ITL needs two tokens
    first, last, n_multi = cols["first_token_at"][multi], cols["last_token_at"][multi], cols["output_length"][multi]
    spans = last - first
    weighted = sum(spans.tolist()) / int(n_multi.sum()) * MS_PER_S if len(spans) else None
    itl = spans / (n_multi - 1)
    summary: dict[str, Any] = {
        "requests": counts,
        "ttft_ms": _stats_ms(_gap(cols, "arrived_at", "first_token_at", done)),
        "itl_ms": _stats_ms(itl),
        "e2e_ms": _stats_ms(_gap(cols, "arrived_at", "last_token_at", done)),
        "queue_ms": _stats_ms(_gap(cols, "arrived_at", "first_admitted_at", done)),
        "router_queue_ms": _stats_ms(_gap(cols, "arrived_at", "dispatched_at", done)
                                     - _known(cols, "frontend_s", "arrived_at", "dispatched_at", done)),
        "transfer_ms": _stats_ms(_gap(cols, "prefilled_at", "handed_off_at", done)),
        "decode_queue_ms": _stats_ms(_gap(cols, "handed_off_at", "decode_admitted_at", done)),
        "itl_ms_token_weighted": weighted,
        "throughput": {
            "requests_per_s": len(done) / duration_s if duration_s > 0 else None,
            "output_tokens_per_s": out_tokens / duration_s if duration_s > 0 else None,
        },
        "duration_s": duration_s,
        "worker_seconds": dict(records.worker_seconds),
        "gpu_hours": {pool: gpu_s / S_PER_HOUR for pool, gpu_s in
                      (records.gpu_seconds or records.worker_seconds).items()},
        "prefix_cache_hit_ratio": (records.prompt_hit_tokens / records.prompt_lookup_tokens
                                   if records.prompt_lookup_tokens else 0.0),
        "prefix_cache_hit_tokens": records.prompt_hit_tokens,
        "passes": dict(records.passes),
        "speculative": _speculation(records.speculation),
        "kv_offload": _kv_offload(records),
        "saturation": _saturation(cols),
        "ttft_components": _ttft_components(cols, done),
        "stop": {"reason": records.stop_reason, "detail": records.stop_detail,
                 "incomplete": counts["incomplete"] > 0 or records.stop_reason != "completed"},
    }
    if records.worker_counts is not None:
        summary["workers"] = _worker_summary(records)
    if sla is not None and sla.is_set:
        bounds = _meets_each(cols, done, sla)
        ok = np.logical_and.reduce(list(bounds.values()))
        good = done[ok]
        arrived = n_total - counts["not_arrived"]  # the requests that arrived before the run stopped
        summary["goodput"] = {
            "requests_per_s": len(good) / duration_s if duration_s > 0 else None,
            "output_tokens_per_s": int(cols["output_length"][good].sum()) / duration_s if duration_s > 0 else None,
            "fraction": len(good) / arrived if arrived else None,
            # each bound alone: which one a deployment misses
            "fraction_by_bound": {name: int(met.sum()) / arrived if arrived else None
                                  for name, met in bounds.items()},
        }
    return summary


def _meets_each(cols: dict, rows: np.ndarray, sla: SlaSpec) -> dict[str, np.ndarray]:
    """For each bound ``sla`` sets (``ttft_ms``, ``itl_ms``, ``e2e_ms``), which of the
    completed ``rows`` meet it. A request's ITL is its mean, (last - first token) / (tokens -
    1); one with fewer than two tokens has none and meets the ITL bound."""
    arrived = cols["arrived_at"][rows]
    out = {}
    if sla.ttft_ms is not None:
        ttft = cols["first_token_at"][rows] - arrived
        out["ttft_ms"] = ~np.isnan(ttft) & (ttft * MS_PER_S <= sla.ttft_ms)
    if sla.itl_ms is not None:
        n = cols["output_length"][rows]
        first = cols["first_token_at"][rows]
        with np.errstate(divide="ignore", invalid="ignore"):
            itl = (cols["last_token_at"][rows] - first) / (n - 1)
        has_itl = (n >= 2) & ~np.isnan(first)
        out["itl_ms"] = ~has_itl | (itl * MS_PER_S <= sla.itl_ms)
    if sla.e2e_ms is not None:
        e2e = cols["last_token_at"][rows] - arrived  # NaN (not met) without a token
        out["e2e_ms"] = ~np.isnan(e2e) & (e2e * MS_PER_S <= sla.e2e_ms)
    return out


#: the backlog must grow faster than this share of the offered rate for a run to be overloaded
OVERLOAD_GROWTH_SHARE = 0.05
#: ... and end the arrival window at least this many requests deep (short runs are not judged)
OVERLOAD_MIN_BACKLOG = 20
#: backlog samples over the arrival window
_BACKLOG_SAMPLES = 20


def _saturation(cols: dict) -> Optional[dict]:
    """The summary's ``saturation`` section: does the cluster keep up with the load offered?

    Over the arrival window (first to last release), ``offered_requests_per_s`` = (released -
    1) / window; ``served_requests_per_s`` = completed requests / (last end - first release);
    the backlog, requests released (and not rejected) still waiting for their first token
    (their end, without output tokens), sampled at 20 evenly spaced times across the window,
    its least-squares growth ``backlog_growth_per_s`` and its value at the last release
    ``backlog_at_last_arrival``. Requests being decoded are not backlog: a stable cluster
    holds about rate x E2E of them (Little's law), a number that climbs from 0 at the start of
    any run, while the requests waiting for a first token stay few (rate x TTFT) unless the
    cluster falls behind. ``overloaded``: the backlog grows faster than 5% of the offered rate
    and ends the window at least 20 requests deep (queueing theory: below saturation the
    queue of a stable system does not grow; above it, it grows at the offered minus the served
    rate). ``rejected``: requests refused (they are not backlog; the verdict names them).
    ``verdict``: one line saying so. None with fewer than 2 releases or all within a nanosecond."""
    arrived = cols["arrived_at"]
    status = cols["status"]
    released_all = ~np.isnan(arrived)
    rejected = int(np.count_nonzero(released_all & (status == "rejected")))
    kept = released_all & (status != "rejected")
    released = np.sort(arrived[kept])
    if np.count_nonzero(released_all) < 2 or released_all.sum() and np.ptp(arrived[released_all]) <= 0:
        return None
    t0, t1 = float(np.min(arrived[released_all])), float(np.max(arrived[released_all]))
    window = t1 - t0
    if window < 1e-9:  # released within a nanosecond: one instant as far as rates go
        return None
    served_first = np.where(np.isnan(cols["first_token_at"]), cols["finished_at"], cols["first_token_at"])[kept]
    served_first = np.sort(served_first[~np.isnan(served_first)])
    times = np.linspace(t0, t1, _BACKLOG_SAMPLES)
    backlog = (np.searchsorted(released, times, side="right") - np.searchsorted(served_first, times, side="right"))
    # (fitted on the window scaled to [0, 1], then back to per second: better conditioned)
    growth = float(np.polyfit((times - t0) / window, backlog.astype(float), 1)[0]) / window
    offered = (int(np.count_nonzero(released_all)) - 1) / window
    completed = cols["finished_at"][status == "completed"]
    served = len(completed) / (float(completed.max()) - t0) if len(completed) and completed.max() > t0 else 0.0
    deep = int(backlog[-1])
    overloaded = growth > OVERLOAD_GROWTH_SHARE * offered and deep >= OVERLOAD_MIN_BACKLOG
    n_released = int(np.count_nonzero(released_all))
    refused = (f"; {rejected} of {n_released} requests rejected (each could never fit a worker: its KV "
               "cache or max_model_len)" if rejected else "")
    if rejected == n_released:
        verdict = (f"serves nothing: all {n_released} requests rejected (each could never fit a worker: its KV "
                   "cache or max_model_len)")
    elif overloaded:
        verdict = (f"overloaded: {offered:.3g} requests/s offered, {served:.3g}/s served; the requests waiting "
                   f"for a first token grow by {growth:.3g}/s while they arrive and end {deep} deep, so latency "
                   f"grows with the run's length{refused}")
    else:
        verdict = f"keeps up: {offered:.3g} requests/s offered, {served:.3g}/s served{refused}"
    return {"offered_requests_per_s": offered, "served_requests_per_s": served,
            "backlog_growth_per_s": growth, "backlog_at_last_arrival": deep, "overloaded": overloaded,
            "rejected": rejected, "verdict": verdict}


def _worker_summary(records: RunRecords) -> dict:
    """Per pool, with a planner: ``min_active`` / ``max_active`` workers over the run and the
    time-weighted ``mean_provisioned`` (worker-seconds / run time)."""
    out = {}
    for pool, seconds in records.worker_seconds.items():
        active = [c.active for c in records.worker_counts if c.pool == pool]
        out[pool] = {"min_active": min(active), "max_active": max(active),
                     "mean_provisioned": seconds / records.end_at if records.end_at > 0 else None}
    return out


def _cell(value: float) -> str:
    """One cell of the latency table, 11 characters with a space before: 2 decimals, or 4
    significant digits in scientific notation when those would not fit (1e8 ms and more)."""
    text = f"{value:.2f}"
    return f"{text:>11}" if len(text) <= 10 else f"{value:11.4g}"


def render_text(summary: dict[str, Any], title: str = "") -> str:
    """A terminal table of the summary."""
    lines = []
    if title:
        lines.append(title)
    c = summary["requests"]
    if summary["stop"]["reason"] != "completed":
        lines.append(f"run stopped early ({summary['stop']['reason']}): results are partial")
    lines.append(f"requests: {c['completed']} completed, {c['rejected']} rejected, "
                 f"{c['incomplete']} incomplete (of {c['total']})")
    lines.append(f"{'':15}{'mean':>11}{'p50':>11}{'p90':>11}{'p99':>11}")
    # labels name summary.json's keys (transfer_ms: "transfer ms")
    rows = [("ttft_ms", "TTFT ms"), ("itl_ms", "ITL ms"), ("e2e_ms", "E2E ms"), ("queue_ms", "queue ms")]
    if summary.get("transfer_ms") is not None:
        rows += [("transfer_ms", "transfer ms"), ("decode_queue_ms", "decode queue ms")]
    for key, label in rows:
        st = summary[key]
        if st is None:
            lines.append(f"{label:15}{'-':>11}{'-':>11}{'-':>11}{'-':>11}")
        else:
            lines.append(f"{label:15}" + "".join(_cell(st[k]) for k in ("mean", "p50", "p90", "p99")))
    tp = summary["throughput"]
    if tp["requests_per_s"] is not None:
        lines.append(f"throughput: {tp['requests_per_s']:.3f} req/s, "
                     f"{tp['output_tokens_per_s']:.1f} output tokens/s over {summary['duration_s']:.1f} s")
    ws = ", ".join(f"{k} {v:.1f}" for k, v in summary["worker_seconds"].items())
    gh = sum(summary["gpu_hours"].values())
    lines.append(f"worker-seconds: {ws}; GPU-hours {gh:.3f}; prefix cache hit ratio "
                 f"{summary['prefix_cache_hit_ratio']:.3f}")
    spec = summary.get("speculative")
    if spec is not None:
        rates = ", ".join("-" if a is None else f"{a:.2f}" for a in spec["acceptance_by_position"])
        lines.append(f"speculative: {spec['accept_length']:.2f} tokens per verify round "
                     f"({spec['tokens_per_round']:.2f} after output cuts) over {spec['verify_rounds']} "
                     f"rounds; acceptance by draft position {rates}")
    off = summary.get("kv_offload")
    if off is not None:
        storage = (f" ({off['storage_hit_ratio']:.3f} of it staged from storage)"
                   if "storage_hit_ratio" in off else "")
        lines.append(f"host KV tier: prompt tokens hit {off['gpu_hit_ratio']:.3f} on GPU, {off['host_hit_ratio']:.3f} "
                     f"restored from host{storage}; {off['stored_blocks']} blocks stored ({off['d2h_gb']:.3f} GB), "
                     f"{off['restored_blocks']} restored ({off['h2d_gb']:.3f} GB)")
    sat = summary.get("saturation")
    if sat is not None and sat["overloaded"]:
        lines.append("OVERLOADED" + sat["verdict"][len("overloaded"):])
    if "workers" in summary:
        lines.append("planner: " + ", ".join(
            f"{pool} {w['min_active']}-{w['max_active']} active (mean {w['mean_provisioned']:.2f} provisioned)"
            for pool, w in summary["workers"].items() if w["mean_provisioned"] is not None))
    if "goodput" in summary and summary["goodput"]["requests_per_s"] is not None:
        g = summary["goodput"]
        each = ", ".join(f"{name.removesuffix('_ms').upper()} alone {100 * f:.1f}%"
                         for name, f in g["fraction_by_bound"].items() if f is not None)
        lines.append(f"goodput: {g['requests_per_s']:.3f} req/s, {g['output_tokens_per_s']:.1f} "
                     f"tokens/s, {100 * g['fraction']:.1f}% of requests meet the SLA ({each})")
    return "\n".join(lines)
