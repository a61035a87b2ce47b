"""What one worker does in one forward pass, pure (no SimPy): :mod:`~simkit.engine.kvcache` (the
paged KV cache with prefix caching, vLLM's and SGLang's eviction orders),
:mod:`~simkit.engine.scheduler` (the engines' batch formation: vLLM, SGLang and TRT-LLM on a
shared base), :mod:`~simkit.engine.latency` (what a pass costs: the reference's polynomial,
constant, roofline, measured tables and aiconfigurator), :mod:`~simkit.engine.hardware` (GPUs,
model architectures and fitted calibration, with their package data in ``data/``) and
:mod:`~simkit.engine.resolve` (the defaults and checks a scenario's hardware implies, applied
after its specs are read). The worker process (:mod:`simkit.cluster.worker`) drives it: the
scheduler forms a pass, the latency model prices it, the scheduler completes it. May import
:mod:`simkit.core`, :mod:`simkit.spec`, numpy and, only when an ``aic`` model is asked for,
aiconfigurator-core; must not import simpy, the workload readers, the cluster processes, the
composition root, output or the CLI.
"""
