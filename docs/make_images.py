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
    print("wrote", OUT)


if __name__ == "__main__":
    main()
