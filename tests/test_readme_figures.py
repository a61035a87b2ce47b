"""README figures quoted from quick runs stay what the code prints.

The README quotes figures from runs of the shipped scenarios; when the engine, a latency model
or its calibration changes, those figures drift unless someone reruns them (four had, found by
rerunning every quick command the README quotes). Each case here reruns one quoted what-if
through the Python API and requires the README's sentence, at the README's precision, to hold
the current figures: a change that moves them fails here until the README says so.
"""

from __future__ import annotations

import re
from pathlib import Path

import simkit

REPO = Path(__file__).resolve().parent.parent
README = re.sub(r"\s+", " ", (REPO / "README.md").read_text())


def _summary(scenario: str, overrides: dict | None = None) -> dict:
    return simkit.run(str(REPO / "scenarios" / scenario), overrides or {}).summary


def _quoted(sentence: str) -> None:
    assert sentence in README, f"README no longer says what the run prints; expected: {sentence!r}"


def test_speculative_what_if():
    # README "Speculative decoding": EAGLE k = 3 at [0.8, 0.7, 0.6] against no drafts
    on = _summary("speculative.yaml")
    off = _summary("speculative.yaml", {"pools.aggregated.speculative": None})
    _quoted(f"ITL p50 {on['itl_ms']['p50']:.1f} ms against {off['itl_ms']['p50']:.1f} ms without, goodput "
            f"{100 * on['goodput']['fraction']:.1f}% of requests against {100 * off['goodput']['fraction']:.1f}%")
    # one row of the acceptance x k table: a = 0.7 at every position, k = 1, 2, 3, 5
    cells = []
    for k in (1, 2, 3, 5):
        s = _summary("speculative.yaml", {"pools.aggregated.speculative.acceptance_rates": 0.7,
                                          "pools.aggregated.speculative.num_speculative_tokens": k})
        cells.append(f"{s['itl_ms']['p50']:.2f} ({100 * s['goodput']['fraction']:.0f}%)")
    _quoted("| 0.7 | " + " | ".join(cells) + " |")


def test_kv_offload_what_if():
    # README "KV offload": scenarios/kv_offload.yaml with and without its host tier
    tier = _summary("kv_offload.yaml")
    none = _summary("kv_offload.yaml", {"pools.aggregated.kv_offload": None})
    _quoted(f"TTFT p90 {tier['ttft_ms']['p90']:.0f} ms with the tier, {none['ttft_ms']['p90']:.0f} ms without")


def test_sglang_mixed_chunk_what_if():
    # README "Models and their sources", sglang: agg.yaml with --enable-mixed-chunk off and on
    base = {"pools.aggregated.backend": "sglang"}
    plain = _summary("agg.yaml", base)
    mixed = _summary("agg.yaml", dict(base, **{"pools.aggregated.sglang.enable_mixed_chunk": True}))
    _quoted(f"ITL p99 {plain['itl_ms']['p99']:.1f} -> {mixed['itl_ms']['p99']:.1f} ms, TTFT mean "
            f"{plain['ttft_ms']['mean']:.1f} -> {mixed['ttft_ms']['mean']:.1f} ms, "
            f"{100 * plain['goodput']['fraction']:.1f}% -> {100 * mixed['goodput']['fraction']:.1f}% of requests "
            "within the SLA")
