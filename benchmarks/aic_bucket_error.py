"""Error of the aic latency model's bucketed cache against exact aiconfigurator calls.

    python benchmarks/aic_bucket_error.py [--model Qwen3-32B] [--gpu H100] [--tp 1]
        [--precision fp8] [--backend vllm] [--steps-per-octave 64] [--samples 2000]

Draws pass shapes (seeded): pure decode (1..256 requests, 100..16k tokens of context each),
pure prefill (1..16k tokens) and mixed passes; prices each exactly and through the cache and
prints the median, p99 and max |relative error| of the bucketed pass time, the cache hit
ratio, and the time per exact call vs per cached call. Needs aiconfigurator-core.
"""

from __future__ import annotations

import argparse
import random
import time

import numpy as np

from simkit.spec import AicLatency
from simkit.engine.latency.aic import AicModel, bucket


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="Qwen3-32B")
    ap.add_argument("--gpu", default="H100")
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--precision", default="fp8")
    ap.add_argument("--backend", default="vllm")
    ap.add_argument("--steps-per-octave", type=int, default=64)
    ap.add_argument("--samples", type=int, default=2000)
    args = ap.parse_args()
    spec = AicLatency(model=args.model, gpu=args.gpu, tensor_parallel_size=args.tp, precision=args.precision,
                      kv_cache_dtype="fp8" if args.precision != "bf16" else "auto", backend=args.backend,
                      bucket_steps_per_octave=args.steps_per_octave)
    model = AicModel(spec)
    rng = random.Random(1)
    shapes = []
    for _ in range(args.samples):
        kind = rng.random()
        r = rng.randint(1, 256) if kind > 0.2 else 0
        n = 0 if kind > 0.5 else rng.randint(1, 16384)
        if not r and not n:
            n = rng.randint(1, 16384)
        ctx = r * int(np.exp(rng.uniform(np.log(100), np.log(16384)))) if r else 0
        shapes.append((n, r, ctx))
    t0 = time.perf_counter()
    exact = [model.exact_ms(n, r, -(-c // r) if r else 0) for n, r, c in shapes]
    t1 = time.perf_counter()
    cached = [model.pass_time_s(n, r, c) * 1e3 for n, r, c in shapes]
    t2 = time.perf_counter()
    again = time.perf_counter()
    for n, r, c in shapes:
        model.pass_time_s(n, r, c)
    t3 = time.perf_counter()
    err = np.abs(np.array(cached) / np.array(exact) - 1)
    print(f"{args.model} {args.precision} on {args.tp} x {args.gpu}, {args.backend}, {args.steps_per_octave} "
          f"buckets per octave (inputs grow by < {1 / args.steps_per_octave:.2%}; "
          f"e.g. 1000 -> {bucket(1000, args.steps_per_octave)}, 2048 -> {bucket(2048, args.steps_per_octave)})")
    print(f"{len(shapes)} passes: |rel err| median {np.median(err) * 100:.2f}%  p99 {np.quantile(err, 0.99) * 100:.2f}%  "
          f"max {err.max() * 100:.2f}%; {len(model.cache)} buckets filled")
    print(f"exact call {(t1 - t0) / len(shapes) * 1e6:.0f} us; first pass through the cache "
          f"{(t2 - t1) / len(shapes) * 1e6:.0f} us; cached {(t3 - again) / len(shapes) * 1e6:.1f} us per pass")


if __name__ == "__main__":
    main()
