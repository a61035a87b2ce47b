"""``python -m simkit step --model M --gpu G [--tp N] [--prefill-tokens N] [--decode-contexts
C1,C2,...] ...``: one forward pass timed with the roofline model, its operator breakdown
printed. Part of :mod:`simkit.cli`.
"""

from __future__ import annotations

import argparse
from typing import Sequence

from simkit.cli.common import _fail, _Parser


def _step_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m simkit step",
                description="Time one forward pass with the roofline model and show its breakdown.")
    p.add_argument("--model", required=True, help="a shipped model name or a config.json path")
    p.add_argument("--gpu", required=True, help="a shipped GPU name (H100, H200, B200, ...)")
    p.add_argument("--tp", "--tensor-parallel-size", dest="tp", type=int, default=1, help="GPUs per worker")
    p.add_argument("--precision", choices=("bf16", "fp8", "fp4"), default="bf16", help="weight precision")
    p.add_argument("--kv-cache-dtype", choices=("auto", "bf16", "fp8"), default="auto")
    p.add_argument("--backend", choices=("vllm", "sglang", "trtllm"), default=None,
                   help="the serving engine whose fitted overheads apply (default: the GPU's fit)")
    p.add_argument("--async-scheduling", action="store_true",
                   help="the engine schedules the next pass while one runs (vLLM's --async-scheduling): "
                        "the host overheads fitted for it, where they exist")
    p.add_argument("--prefill-tokens", type=int, default=0, help="prompt tokens computed in the pass (one chunk)")
    p.add_argument("--decode-contexts", default="", metavar="C1,C2,...",
                   help="KV length of each decode request after the pass, comma-separated")
    p.add_argument("--speculative", type=int, default=0, metavar="K",
                   help="decode requests verify K draft tokens (speculative decoding)")
    p.add_argument("--spec-method", choices=("mtp", "eagle", "ngram", "draft_model"), default="mtp",
                   help="the drafter, with --speculative (default mtp)")
    p.add_argument("--draft-model", default=None, help="with --spec-method draft_model: its model")
    return p


def step_table(model, prefill_tokens: int, contexts: list[int]) -> str:
    """The pass's operator table and totals (``model`` a RooflineModel)."""
    ops = model.breakdown(prefill_tokens, len(contexts), sum(contexts))
    spec, gpu = model.spec, model.gpu
    lines = [f"{model.arch.name} on {model.tp} x {gpu.name} ({spec.precision} weights, {spec.kv_precision} KV): "
             f"{prefill_tokens} prefill tokens, {len(contexts)} decode requests ({sum(contexts)} context tokens)",
             f"{'op':18}{'GFLOP':>10}{'MB':>10}{'compute ms':>12}{'memory ms':>11}{'time ms':>10}  bound"]
    for op in ops:
        lines.append(f"{op.name:18}{op.flops / 1e9:10.2f}{op.bytes / 1e6:10.1f}{op.compute_s * 1e3:12.3f}"
                     f"{op.memory_s * 1e3:11.3f}{op.time_s * 1e3:10.3f}  {op.bound}")
    total = sum(op.time_s for op in ops) * 1e3
    by = {"gemm": ("gemm", "experts", "lm_head", "elementwise"),
          "attention": ("attention_prefill", "attention_decode"),
          "communication": ("allreduce",), "overhead": ("overhead",), "draft": ("draft",)}
    parts = ", ".join(f"{k} {sum(o.time_s for o in ops if o.name in names) * 1e3:.3f}" for k, names in by.items())
    compute = sum(o.time_s for o in ops if o.bound == "compute") * 1e3
    memory = sum(o.time_s for o in ops if o.bound == "memory") * 1e3
    lines.append(f"pass time {total:.3f} ms: {parts} ms; compute-bound ops {compute:.3f} ms, "
                 f"memory-bound ops {memory:.3f} ms ({'compute' if compute >= memory else 'memory'}-bound pass)")
    return "\n".join(lines)


def _overheads_line(args, moe: bool) -> str:
    """Which fitted host overheads the pass took (the GPU's, its engine's, their async one)."""
    from simkit.engine.hardware import load_calibration

    engine = f"{args.backend} fit" if args.backend else "fit over all engines"
    line = f"host overheads: the {args.gpu} {engine}{' (MoE rows)' if moe and args.backend else ''}"
    if args.async_scheduling:
        fits = [load_calibration(args.gpu, args.backend, moe, args.precision, flag) for flag in (True, False)]
        line += (" for async scheduling" if fits[0] != fits[1] else
                 " (--async-scheduling: no fit of its own for this GPU and engine, so the same)")
    return line


def step_main(argv: Sequence[str]) -> int:
    """``python -m simkit step ...``: exit 0, or 2 for a bad name or value (one line)."""
    args = _step_parser().parse_args(argv)
    from simkit.spec import RooflineLatency
    from simkit.engine.latency import RooflineModel
    from simkit.engine.hardware import HardwareError, kv_capacity_blocks, load_gpu, load_model
    from simkit.engine.resolve import check_latency

    try:
        items = args.decode_contexts.split(",") if args.decode_contexts.strip() else []
        contexts = [int(c) for c in items]
    except ValueError:
        return _fail([f"simkit step: --decode-contexts {args.decode_contexts!r}: expected comma-separated "
                      "integers, e.g. 1000,2500"])
    if args.prefill_tokens < 0:
        return _fail([f"simkit step: --prefill-tokens must be >= 0, got {args.prefill_tokens}"])
    if any(c < 1 for c in contexts):
        return _fail([f"simkit step: --decode-contexts must each be >= 1, got {min(contexts)}"])
    if args.tp < 1:
        return _fail([f"simkit step: --tp must be >= 1, got {args.tp}"])
    if not args.prefill_tokens and not contexts:
        return _fail(["simkit step: empty pass: give --prefill-tokens and/or --decode-contexts"])
    if not 0 <= args.speculative <= 16:
        return _fail([f"simkit step: --speculative must be 0 to 16 draft tokens, got {args.speculative}"])
    if (args.spec_method == "draft_model") != bool(args.draft_model):
        return _fail(["simkit step: --draft-model goes with --spec-method draft_model (and it needs one)"])
    try:
        load_model(args.model)
        load_gpu(args.gpu)
        spec = RooflineLatency(model=args.model, gpu=args.gpu, tensor_parallel_size=args.tp,
                               precision=args.precision, kv_cache_dtype=args.kv_cache_dtype,
                               backend=args.backend)
        check_latency(spec)  # the tensor-parallel size must split the heads
        kv_capacity_blocks(spec, 16)  # the weights must leave room for KV, as a scenario requires
    except (HardwareError, ValueError) as exc:
        return _fail([f"simkit step: {exc}"])
    longest = load_model(args.model).max_position_embeddings
    if longest and max([args.prefill_tokens] + contexts) > longest:
        return _fail([f"simkit step: {args.model} takes sequences of at most {longest} tokens "
                      f"(max_position_embeddings); got {max([args.prefill_tokens] + contexts)}"])
    model = RooflineModel(spec, async_scheduling=args.async_scheduling)
    if args.speculative:
        from simkit.spec import SpeculativeSpec
        from simkit.engine.latency.speculative import SpeculativeRoofline

        draft = None
        if args.draft_model:
            try:
                load_model(args.draft_model)
            except HardwareError as exc:
                return _fail([f"simkit step: --draft-model: {exc}"])
            draft = RooflineModel(RooflineLatency(model=args.draft_model, gpu=args.gpu, tensor_parallel_size=args.tp,
                                                  precision=args.precision, kv_cache_dtype=args.kv_cache_dtype,
                                                  backend=args.backend), async_scheduling=args.async_scheduling)
        sspec = SpeculativeSpec(method=args.spec_method, num_speculative_tokens=args.speculative,
                                draft_model=args.draft_model)
        model = SpeculativeRoofline(model, sspec, draft)
    text = step_table(model, args.prefill_tokens, contexts)
    text += "\n" + _overheads_line(args, load_model(args.model).is_moe)
    gpu = load_gpu(args.gpu)
    if gpu.compute_format(args.precision) != args.precision:  # weight-only quantisation
        text += (f"\n(the {args.gpu} has no {args.precision} tensor cores: {args.precision} weights are read as "
                 f"{args.precision} and computed at its {gpu.compute_format(args.precision)} rate, "
                 f"{gpu.tflops(args.precision):g} TFLOPS)")
    if args.speculative:
        text += (f"\n(a verify pass: each decode request checks its last token and {args.speculative} drafts, "
                 f"{args.spec_method} drafter; the drafts' queries are priced with the prompt tokens, "
                 f"attention_prefill, and the draft's own passes as 'draft')")
    print(text)
    return 0
