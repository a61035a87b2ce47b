"""Summaries of a run: latency percentiles, throughput, goodput, worker-seconds.

Definitions (REFERENCE.md section 7): TTFT = first token - arrival; per-request ITL =
(last token - first token) / (tokens - 1), undefined below 2 tokens; E2E = completion -
arrival; queue = first admission - arrival. Percentiles are nearest-rank (the k-th smallest,
k = ceil(q/100 * n)), over completed requests, as in the reference. Throughput divides by the
duration, the time of the last completion. Goodput counts completed requests that meet every
SLA bound given.

Layer L5: imports records and config only; never sees a live environment.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import numpy as np

from simkit.config import SlaSpec
from simkit.records import RunRecords
from simkit.units import MS_PER_S, S_PER_HOUR

__all__ = ["nearest_rank", "request_rows", "summarize", "render_text"]

PERCENTILES = (50, 90, 99)


def _ms(value: Optional[float]) -> Optional[float]:
    """Seconds to ms; None (JSON null) for a missing or non-finite value."""
    if value is None:
        return None
    ms = value * MS_PER_S
    return ms if math.isfinite(ms) else None


def request_rows(records: RunRecords) -> list[dict[str, Any]]:
    """One JSON-ready dict per request (times in ms since the earliest arrival)."""
    rows = []
    for r in records.requests:
        rows.append({
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
            "prefill_worker": r.prefill_worker,
            "decode_worker": r.decode_worker,
            "priority": r.priority,
        })
    return rows


def nearest_rank(sorted_values: Sequence[float], q: float) -> float:
    """The nearest-rank q-th percentile of ascending ``sorted_values`` (non-empty)."""
    n = len(sorted_values)
    k = min(max(math.ceil(q / 100.0 * n), 1), n)
    return float(sorted_values[k - 1])


def _stats_ms(values_s: list) -> Optional[dict]:
    if not values_s:
        return None
    arr = np.sort(np.asarray(values_s, dtype=float)) * MS_PER_S
    out = {"mean": float(arr.mean())}
    for q in PERCENTILES:
        out[f"p{q}"] = nearest_rank(arr, q)
    return out


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
    pool; ``stop`` {reason, detail, incomplete}: why the run ended and whether it is partial; and
    ``goodput`` {requests_per_s, output_tokens_per_s, fraction} when ``sla`` sets a
    bound.
    """
    reqs = records.requests
    done = [r for r in reqs if r.status == "completed"]
    counts = {
        "total": len(reqs),
        "completed": len(done),
        "rejected": sum(r.status == "rejected" for r in reqs),
        "incomplete": sum(r.status == "incomplete" for r in reqs),
        # of the incomplete, those never released before the run stopped (a time cap)
        "not_arrived": sum(r.arrived_at is None for r in reqs),
    }
    duration_s = max((r.finished_at for r in done), default=0.0)
    out_tokens = sum(r.output_length for r in done)
    span = [(r.last_token_at - r.first_token_at, r.output_length - 1) for r in done if r.output_length > 1]
    weighted = sum(s for s, _ in span) / sum(n for _, n in span) * MS_PER_S if span else None
    summary: dict[str, Any] = {
        "requests": counts,
        "ttft_ms": _stats_ms([r.ttft_s for r in done if r.ttft_s is not None]),
        "itl_ms": _stats_ms([r.itl_s for r in done if r.itl_s is not None]),
        "e2e_ms": _stats_ms([r.e2e_s for r in done]),
        "queue_ms": _stats_ms([r.queue_s for r in done if r.queue_s is not None]),
        "router_queue_ms": _stats_ms([r.router_queue_s for r in done if r.router_queue_s is not None]),
        "transfer_ms": _stats_ms([r.transfer_s for r in done if r.transfer_s is not None]),
        "decode_queue_ms": _stats_ms([r.decode_queue_s for r in done if r.decode_queue_s is not None]),
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
        "stop": {"reason": records.stop_reason, "detail": records.stop_detail,
                 "incomplete": counts["incomplete"] > 0 or records.stop_reason != "completed"},
    }
    if records.worker_counts is not None:
        summary["workers"] = _worker_summary(records)
    if sla is not None and sla.is_set:
        good = [r for r in done if _meets(r, sla)]
        summary["goodput"] = {
            "requests_per_s": len(good) / duration_s if duration_s > 0 else None,
            "output_tokens_per_s": sum(r.output_length for r in good) / duration_s if duration_s > 0 else None,
            # of the requests that arrived before the run stopped
            "fraction": len(good) / (len(reqs) - counts["not_arrived"]) if len(reqs) > counts["not_arrived"] else None,
        }
    return summary


def _worker_summary(records: RunRecords) -> dict:
    """Per pool, with a planner: ``min_active`` / ``max_active`` workers over the run and the
    time-weighted ``mean_provisioned`` (worker-seconds / run time)."""
    out = {}
    for pool, seconds in records.worker_seconds.items():
        active = [c.active for c in records.worker_counts if c.pool == pool]
        out[pool] = {"min_active": min(active), "max_active": max(active),
                     "mean_provisioned": seconds / records.end_at if records.end_at > 0 else None}
    return out


def _meets(r, sla: SlaSpec) -> bool:
    if sla.ttft_ms is not None and (r.ttft_s is None or r.ttft_s * MS_PER_S > sla.ttft_ms):
        return False
    if sla.itl_ms is not None and r.itl_s is not None and r.itl_s * MS_PER_S > sla.itl_ms:
        return False
    if sla.e2e_ms is not None and r.e2e_s * MS_PER_S > sla.e2e_ms:
        return False
    return True


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
    lines.append(f"{'':10}{'mean':>11}{'p50':>11}{'p90':>11}{'p99':>11}")
    rows = [("ttft_ms", "TTFT ms"), ("itl_ms", "ITL ms"), ("e2e_ms", "E2E ms"), ("queue_ms", "queue ms")]
    if summary.get("transfer_ms") is not None:
        rows += [("transfer_ms", "link ms"), ("decode_queue_ms", "dec. queue")]
    for key, label in rows:
        st = summary[key]
        if st is None:
            lines.append(f"{label:10}{'-':>11}{'-':>11}{'-':>11}{'-':>11}")
        else:
            lines.append(f"{label:10}" + "".join(f"{st[k]:11.2f}" for k in ("mean", "p50", "p90", "p99")))
    tp = summary["throughput"]
    if tp["requests_per_s"] is not None:
        lines.append(f"throughput: {tp['requests_per_s']:.3f} req/s, "
                     f"{tp['output_tokens_per_s']:.1f} output tokens/s over {summary['duration_s']:.1f} s")
    ws = ", ".join(f"{k} {v:.1f}" for k, v in summary["worker_seconds"].items())
    gh = sum(summary["gpu_hours"].values())
    lines.append(f"worker-seconds: {ws}; GPU-hours {gh:.3f}; prefix cache hit ratio "
                 f"{summary['prefix_cache_hit_ratio']:.3f}")
    if "workers" in summary:
        lines.append("planner: " + ", ".join(
            f"{pool} {w['min_active']}-{w['max_active']} active (mean {w['mean_provisioned']:.2f} provisioned)"
            for pool, w in summary["workers"].items() if w["mean_provisioned"] is not None))
    if "goodput" in summary and summary["goodput"]["requests_per_s"] is not None:
        g = summary["goodput"]
        lines.append(f"goodput: {g['requests_per_s']:.3f} req/s, {g['output_tokens_per_s']:.1f} "
                     f"tokens/s, {100 * g['fraction']:.1f}% of requests meet the SLA")
    return "\n".join(lines)
