#!/usr/bin/env python3
"""Regenerate the README's images with simkit itself: python docs/make_images.py"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

import simkit  # noqa: E402

OUT = os.path.join(HERE, "images")


def save(fig, name: str) -> None:
    fig.savefig(os.path.join(OUT, name), dpi=90, metadata={"Software": None})


def main() -> None:
    os.makedirs(OUT, exist_ok=True)
    small = {"workload.num_requests": 1500}
    disagg = simkit.run(os.path.join(REPO, "scenarios", "disagg.yaml"), small, label="disagg 2P+2D", record_passes=True)
    more = simkit.run(os.path.join(REPO, "scenarios", "disagg.yaml"), dict(small, **{"pools.decode.workers": 3}),
                      label="disagg 2P+3D")
    agg = simkit.run(os.path.join(REPO, "scenarios", "agg.yaml"), small, label="agg 4")
    save(disagg.plot_cdf(more, agg), "latency_cdf.png")
    save(disagg.plot_series(), "worker_series.png")
    save(disagg.plot_passes(until_s=2.0), "pass_timeline.png")
    save(simkit.run(os.path.join(REPO, "scenarios", "planner.yaml")).plot_planner(), "planner.png")
    spec_path = os.path.join(REPO, "scenarios", "speculative.yaml")
    spec = simkit.run(spec_path, label="EAGLE k=3 [0.8, 0.7, 0.6]")
    plain = simkit.run(spec_path, {"pools.aggregated.speculative": None}, label="no speculation")
    save(spec.plot_cdf(plain), "speculative_cdf.png")
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "simkit", "sweep", os.path.join(REPO, "scenarios", "disagg.yaml"),
                        "--grid", "pools.prefill.workers=1,2,3", "--grid", "pools.decode.workers=1,2,3",
                        "--set", "workload.num_requests=1500", "--out", os.path.join(tmp, "sweep")],
                       check=True, cwd=REPO, stdout=subprocess.DEVNULL)
        os.replace(os.path.join(tmp, "sweep", "pareto.png"), os.path.join(OUT, "pareto.png"))
    weka = os.path.join(REPO, "..", "shared", "traces", "weka_agentic_sessions.jsonl")
    if os.path.exists(weka):
        save(kv_offload_sizes(weka), "kv_offload_host_size.png")
    else:
        print("skipped kv_offload_host_size.png: no", weka)
    print("wrote", OUT)


def kv_offload_sizes(trace: str):
    """TTFT against the host tier's size on the Weka agentic sessions (README, "KV offload")."""
    import matplotlib.pyplot as plt

    path = os.path.join(REPO, "scenarios", "kv_offload.yaml")
    base = {"workload": {"kind": "trace", "format": "weka", "path": trace, "sessions_per_s": 0.05},
            "pools.aggregated.num_gpu_blocks": None}
    off = simkit.run(path, dict(base, **{"pools.aggregated.kv_offload": None})).summary
    sizes = [2500, 5000, 10000, 15000, 20000, 30000, 40000]
    rows = [simkit.run(path, dict(base, **{"pools.aggregated.kv_offload.host_blocks": n})).summary for n in sizes]
    gb = [n * 64 * 131072 / 1e9 for n in sizes]  # 64-token blocks of Llama-3.1-8B's 128 KiB per token
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for q, style in (("p90", "o-"), ("mean", "s-"), ("p50", "^-")):
        line, = ax.plot(gb, [r["ttft_ms"][q] / 1000 for r in rows], style, label=f"TTFT {q}")
        ax.axhline(off["ttft_ms"][q] / 1000, color=line.get_color(), ls=":", lw=1)
    ax.set_xlabel("host KV tier per GPU (GB)")
    ax.set_ylabel("TTFT (s)")
    ax.set_title("Weka agentic sessions, Llama-3.1-8B on one H100 (dotted: no host tier)", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


if __name__ == "__main__":
    main()
