"""Pool specs: one pool of identical workers and its engine settings (:class:`PoolSpec`, with
vLLM's knob names), the SGLang and TRT-LLM scheduler settings, and the pools of a scenario
(aggregated, or prefill + decode). The schedulers themselves are in :mod:`simkit.engine.scheduler`.

Imports :mod:`simkit.spec.base` and :mod:`simkit.spec.latency` (a pool may have its own latency
model).
"""

from __future__ import annotations

from typing import Literal, Optional

from attrs import field, frozen

from simkit.core.units import BYTES_PER_GB
from simkit.spec.base import FieldValueError, _at_most, _count, _non_negative, _nonneg, _pos, _positive, _tokens
from simkit.spec.latency import LatencySpec

#: KV blocks per worker when a pool leaves ``num_gpu_blocks`` unset and the latency model does
#: not derive it (the reference mocker's default)
DEFAULT_NUM_GPU_BLOCKS = 16384
#: SGLang's chunk budget when none is set and no GPU is named (the reference's default, and
#: SGLang's own for GPUs up to 160 GB: ``server_args.py``)
SGLANG_CHUNKED_PREFILL_SIZE = 8192
#: SGLang's chunk budget for GPUs of more than 160 GB of memory
SGLANG_CHUNKED_PREFILL_SIZE_LARGE = 16384


@frozen
class SglangSpec:
    """SGLang scheduler settings (``backend: sglang``), with SGLang's names and defaults (the
    reference's too). SGLang's ``page_size`` is the pool's ``block_size``.

    A pass is either an extend (prefill) pass or a decode pass, never mixed: while waiting
    prompts can be admitted, running requests do not decode. An extend pass admits waiting
    requests in ``schedule_policy`` order (fifo: arrival; lpm: longest cached prefix first,
    fifo beyond 128 waiting) while ``max_num_seqs`` allows and each fits three budgets: the
    chunk budget ``chunked_prefill_size`` (null: SGLang's default by GPU memory, 8192 up to
    160 GB and 16384 above, when the latency model names a GPU, else 8192 as the reference;
    never ``max_num_batched_tokens``), which a prompt
    longer than what is left of it takes in a page-aligned chunk; ``max_prefill_tokens`` for
    the prompts admitted whole; and the KV tokens left after reserving, for every running
    request, ``new_token_ratio`` x its remaining output clipped to ``clip_max_new_tokens``
    (the candidate reserves its own clipped output in full). ``new_token_ratio`` starts at
    0.7 x ``schedule_conservativeness``, decays linearly over 600 decode passes to 0.14 of that
    (extend passes do not decay it: SGLang's ``update_running_batch``), and resets when a
    decode pass must retract: a decode pass that cannot grow every running
    request by a token retracts the one with the fewest output tokens (its KV freed, its
    progress recomputed later) until it can.

    ``enable_mixed_chunk`` (SGLang's ``--enable-mixed-chunk``; only with chunked prefill, as
    SGLang's ``is_mixed_chunk``): an extend pass also decodes every running request that has
    its first token, and its chunk, ``max_prefill_tokens`` and KV budgets are first reduced by
    one token per such request (``PrefillAdder``'s ``mixed_with_decode_tokens``; sources:
    SGLang ``scheduler.py`` ``get_new_batch_prefill`` and ``schedule_batch.py``
    ``mix_with_running``). Where the running requests' next tokens would need more pages than
    are free, that extend pass runs without them and they decode in the next pass (which
    retracts as a decode pass does; SGLang allocates without a check there). Aggregated
    pools only (refused on prefill and decode pools). As in SGLang, a chunk budget not much
    above the running requests leaves prompts less than a page: they wait until fewer run.
    """

    schedule_policy: Literal["fifo", "lpm"] = "fifo"
    max_prefill_tokens: int = field(default=16384, validator=_tokens)  #: tokens per extend pass
    chunked_prefill_size: Optional[int] = field(default=None, validator=_tokens)  #: tokens
    clip_max_new_tokens: int = field(default=4096, validator=_tokens)  #: tokens
    schedule_conservativeness: float = field(default=1.0, validator=_pos + [_at_most(100)])
    #: charge ``max_prefill_tokens`` and the KV budget with the chunk a prompt takes in the
    #: pass, as the reference does, instead of its whole remaining prompt as SGLang's
    #: PrefillAdder does (there a long prompt waits for a pass of its own once another prompt
    #: is admitted and it exceeds what is left of ``max_prefill_tokens``). Measured: a 1000-
    #: and a 20000-token prompt arriving together share the reference's first pass (8168
    #: tokens); SGLang runs the 1000 alone.
    budgets_count_chunks: bool = False
    #: extend passes decode the running requests too (SGLang ``--enable-mixed-chunk``)
    enable_mixed_chunk: bool = False
    #: decode passes that must follow an extend pass before the next one, on aggregated
    #: workers with running requests to decode (the reference's ``prefill_decode_interval``;
    #: 0: none; aggregated pools only). Measured on the reference (benchmarks/probe_reference_dp.py
    #: ``sglang_prefill_decode_interval``): prompts arriving during an extend pass prefill one
    #: decode pass later per unit, with or without attention DP; a worker with nothing running
    #: extends at once
    prefill_decode_interval: int = field(default=0, validator=[_non_negative, _at_most(1_000_000)])


@frozen
class TrtllmSpec:
    """TRT-LLM scheduler settings (``backend: trtllm``), with TRT-LLM's names and defaults
    (``TorchLlmArgs``; 0 disables each).

    Batch waiting (TRT-LLM's ``PyExecutor._waiting_requests``): when a pass would run both
    context (prefill) requests and generation (decode) requests, its context requests are held
    back, and the pass decodes only, until ``batch_wait_timeout_iters`` such passes have
    been held or the scheduled tokens (the whole prompts of the context requests plus one per
    decode) reach ``batch_wait_max_tokens_ratio`` x ``max_num_batched_tokens`` (TRT-LLM's
    ``max_num_tokens``); then they run and the count restarts. A pass without decodes never
    waits. It trades TTFT for larger prefill batches (InferenceMAX runs Llama-3.1-70B 1k/1k
    this way: 20 passes, ratio 0.9).
    """

    batch_wait_timeout_iters: int = field(default=0, validator=[_non_negative, _at_most(1_000_000)])  #: passes
    batch_wait_max_tokens_ratio: float = field(default=0.0, validator=_nonneg + [_at_most(1)])


@frozen
class SpeculativeSpec:
    """Speculative decoding (``pools.<pool>.speculative``): each decode pass of a request is a
    verify round of ``num_speculative_tokens`` = k draft tokens. Draft i is accepted with
    probability ``acceptance_rates[i]`` given that drafts 1..i-1 were (conditional, as Dynamo's
    ``aic_nextn_accept_rates``); the round emits 1 + the accepted drafts, cut to the output
    left. The expected tokens per round are 1 + a1 + a1 a2 + ... + a1...ak.

    ``sampling: sampled`` draws each round from the request's own named random stream (seeded
    by ``seed``, null: the scenario's seed and the pool's name), so a request's rounds do not
    depend on what else runs and runs replay exactly; ``expected`` emits the expected count
    with a fractional carry, no randomness (for sweeps that must not be noisy, or to compare
    acceptance vectors without sampling error).

    A round needs KV room for prompt + generated + min(k + 1, output left) tokens; the slots of
    rejected drafts are freed after it. The draft's cost is the ``method``'s: ``mtp`` (one MTP
    head layer per draft step, DeepSeek-V3's multi-token prediction), ``eagle`` (one draft
    decoder layer per step), ``draft_model`` (``draft_model``, a model name or config.json: its
    whole passes, k per round, and its prefill of each prompt), ``ngram`` (prompt lookup: no
    draft compute). Only a roofline latency model prices it; the polynomial, constant and table
    models price a round as a plain decode step over the accepted context, as the reference
    does (measured on ai-dynamo-runtime 1.6.1).

    The reference's own ways, as named options (``scenarios`` comparing with it set them):
    ``verify_in_prefill`` (its vLLM and TRT-LLM cores verify in the pass that ends a prompt:
    priced with a decode step over the prompt, it emits up to k + 1 first tokens; engines emit
    one there) and ``budget_counts_drafts: false`` (it charges a verifying request one token of
    ``max_num_batched_tokens``; vLLM charges k + 1).
    """

    method: Literal["mtp", "eagle", "ngram", "draft_model"] = "mtp"
    num_speculative_tokens: int = field(default=1, validator=[_positive, _at_most(16)])
    #: per draft position, the probability of acceptance given the earlier ones were accepted;
    #: one number: that rate at every position; a list longer than k: its first k (so one
    #: profile serves a sweep over num_speculative_tokens); null: Dynamo's default 0.85, 0.3, then 0
    acceptance_rates: Optional[tuple[float, ...]] = None
    sampling: Literal["sampled", "expected"] = "sampled"
    seed: Optional[int] = field(default=None, validator=[_non_negative, _at_most((1 << 63) - 1)])
    draft_model: Optional[str] = None
    verify_in_prefill: bool = False
    budget_counts_drafts: bool = True

    def __attrs_post_init__(self) -> None:
        rates, k = self.acceptance_rates, self.num_speculative_tokens
        if rates is not None:
            if len(rates) == 1:  # one rate: every draft position
                rates = rates * k
            elif len(rates) < k:
                raise FieldValueError("acceptance_rates", f"'acceptance_rates' needs a rate per draft token "
                                      f"({k}) or one rate for all, got {len(rates)}")
            rates = rates[:k]  # a longer profile: its first k positions (one profile serves a sweep of k)
            object.__setattr__(self, "acceptance_rates", rates)
            if not all(0.0 <= r <= 1.0 for r in rates):
                raise FieldValueError("acceptance_rates", f"'acceptance_rates' must be numbers in [0, 1]: "
                                      f"{list(rates)}")
        if self.method == "draft_model" and not self.draft_model:
            raise FieldValueError("draft_model", "'method: draft_model' needs 'draft_model' (a model name or "
                                  "config.json path)")
        if self.method != "draft_model" and self.draft_model:
            raise FieldValueError("draft_model", f"'draft_model' applies only to method draft_model, not "
                                  f"{self.method}")

    @property
    def rates(self) -> tuple:
        """The acceptance rates, Dynamo's default (0.85, 0.3, 0, ...) when none were given."""
        if self.acceptance_rates is not None:
            return self.acceptance_rates
        return ((0.85, 0.3) + (0.0,) * 16)[:self.num_speculative_tokens]

    @property
    def expected_tokens(self) -> float:
        """Tokens a verify round emits in expectation (before cutting to the output left)."""
        total, p = 1.0, 1.0
        for rate in self.rates:
            p *= rate
            total += p
        return total


@frozen
class StorageTierSpec:
    """A storage KV tier behind the host one (``kv_offload.storage``), as the reference's
    ``g3_offload``: blocks the host tier takes in are written to it in the background, and a
    prompt that continues past its GPU and host hits with storage blocks stages them to the host
    (``first_byte_latency_ms`` + bytes / ``read_gb_per_s``) before restoring them to the GPU.
    ``scope: worker`` gives each worker its own tier (the reference's ``worker_local``); ``pool``
    one tier for the whole pool, which every worker reads and writes (``cluster_shared``). A
    worker's reads (writes) under way together share its ``read_gb_per_s``
    (``write_gb_per_s``) equally; with ``scope: pool`` each is also capped by an equal share of
    ``shared_read_gb_per_s`` (``shared_write_gb_per_s``) (:class:`simkit.cluster.transfer.CappedShare`).
    Defaults are the reference's (measured on ai-dynamo-runtime 1.6.1: 0.1 ms to the first
    byte, 10 GB/s reads; its documented 80 GB/s shared caps, measured binding at 0.1 GB/s)."""

    blocks: int = field(validator=[_positive, _at_most(1 << 40)])
    read_gb_per_s: float = field(default=10.0, validator=_pos)
    write_gb_per_s: float = field(default=10.0, validator=_pos)
    first_byte_latency_ms: float = field(default=0.1, validator=_nonneg + [_at_most(1e12)])
    scope: Literal["worker", "pool"] = "worker"
    #: with ``scope: pool``, the bandwidth all the pool's reads (writes) share: each moves at
    #: most an equal share of it (null: 80, the reference's ``shared_read_bandwidth_gbps`` and
    #: ``shared_write_bandwidth_gbps`` defaults); refused with ``scope: worker``
    shared_read_gb_per_s: Optional[float] = field(default=None, validator=_pos)
    shared_write_gb_per_s: Optional[float] = field(default=None, validator=_pos)
    #: announce its blocks (written, evicted) to a KV-aware router, which weighs them by
    #: ``disk_cache_hit_weight``, as Dynamo's KVBM disk tier does; false (the default): as the
    #: reference's replay, whose storage tier announces nothing
    kv_events: bool = False

    def __attrs_post_init__(self) -> None:
        for name in ("shared_read_gb_per_s", "shared_write_gb_per_s"):
            if self.scope == "worker" and getattr(self, name) is not None:
                raise FieldValueError(name, f"'{name}' caps the reads or writes a pool's workers share: it "
                                      "applies only with 'scope: pool'")

    def shared_bytes_per_s(self, write: bool) -> Optional[float]:
        """The pool-wide cap of its reads (``write`` False) or writes, bytes/s; None with
        ``scope: worker`` (each worker alone)."""
        if self.scope != "pool":
            return None
        gb = self.shared_write_gb_per_s if write else self.shared_read_gb_per_s
        return (80.0 if gb is None else gb) * BYTES_PER_GB


@frozen
class KvOffloadSpec:
    """A host-memory KV tier behind each worker's GPU cache (``pools.<pool>.kv_offload``), as
    vLLM's ``OffloadingConnector`` (CPU offloading) and the reference's ``native_host_offload``.

    Each worker has ``host_blocks`` host blocks of the pool's ``block_size``; or
    ``kv_offloading_size_gib`` GiB of them (vLLM's ``--kv-offloading-size``); with neither, and a
    roofline or aic latency model, the host memory of the worker's GPUs (the GPU's
    ``host_memory_gib``, from its reference system's datasheet, times its GPUs per worker: an
    upper bound, the whole of it). A request's full
    prompt blocks are copied GPU -> host at the end of the pass that computed them (those the
    tier lacks, one copy per request and pass, one copy after another per worker at
    ``d2h_gb_per_s``); a waiting request whose prompt continues past its GPU prefix hit with
    host blocks restores them first (host -> GPU at ``h2d_gb_per_s``) and is admitted when they
    are in, the restore in its TTFT. Host blocks are evicted least recently used first.
    Defaults are the reference's (32 GB/s each way, measured on ai-dynamo-runtime 1.6.1). The
    rules and what was measured: :mod:`simkit.engine.offload`.

    ``kv_bytes_per_token`` sizes a block's copy (null: the roofline model's KV bytes per token
    when the scenario names a model, else 131072, Llama-3.1-8B in bf16, as the handoff link's).
    ``storage``: a storage tier behind the host one (:class:`StorageTierSpec`). Not modelled
    yet, and refused: ``offload: prompt_and_output`` (generated-token blocks have no identity
    until the workloads give them one).
    """

    #: host blocks per worker (null: from ``kv_offloading_size_gib`` or the GPU's host memory)
    host_blocks: Optional[int] = field(default=None, validator=[_positive, _at_most(1 << 40)])
    #: the host tier's size per worker in GiB, vLLM's ``--kv-offloading-size`` (instead of
    #: ``host_blocks``)
    kv_offloading_size_gib: Optional[float] = field(default=None, validator=_pos + [_at_most(1 << 30)])
    d2h_gb_per_s: float = field(default=32.0, validator=_pos)
    h2d_gb_per_s: float = field(default=32.0, validator=_pos)
    #: a pool-wide cap on the copies one way of all its workers (a node's host link, say):
    #: with ``n`` workers copying, each moves at most ``min(d2h_gb_per_s, shared / n)``. null
    #: (the default): none, as the reference's per-rank copies (its shared caps bind only a
    #: host tier the pool shares, which simkit does not model)
    shared_d2h_gb_per_s: Optional[float] = field(default=None, validator=_pos)
    shared_h2d_gb_per_s: Optional[float] = field(default=None, validator=_pos)
    #: before a copy's first byte moves, from when it was accepted (the reference's
    #: ``latency_to_first_byte_ms``, default 0; measured: it adds to a restore, and copies queued
    #: behind one another wait for it once, not each)
    first_byte_latency_ms: float = field(default=0.0, validator=_nonneg + [_at_most(1e12)])
    offload: Literal["prompt", "prompt_and_output"] = "prompt"
    #: ``worker``: a host tier per worker (vLLM's, the reference's ``dp_rank_local``); ``pool``
    #: (one host tier a pool shares, the reference's ``cluster_shared``) is refused: not
    #: modelled yet
    scope: Literal["worker", "pool"] = "worker"
    kv_bytes_per_token: Optional[int] = field(default=None, validator=[_positive, _at_most(1 << 40)])
    #: a storage tier behind the host one (null: none): see :class:`StorageTierSpec`
    storage: Optional[StorageTierSpec] = None

    def __attrs_post_init__(self) -> None:
        if self.host_blocks is not None and self.kv_offloading_size_gib is not None:
            raise FieldValueError("kv_offloading_size_gib", "give 'host_blocks' or 'kv_offloading_size_gib', "
                                  "not both: both size the host tier")
        if self.scope != "worker":
            raise FieldValueError("scope", "'scope: pool' (one host tier a pool's workers share, the reference's "
                                  "cluster_shared G2, which it calls a simulator extension) is not modelled yet: "
                                  "'scope: worker' (a tier per worker, as vLLM), or a storage tier with "
                                  "'storage.scope: pool'")
        if self.offload != "prompt":
            raise FieldValueError("offload", "'offload: prompt_and_output' is not modelled yet: generated-token "
                                  "blocks have no identity to find them again by (only 'prompt')")


@frozen
class PoolSpec:
    """One pool of identical workers and their vLLM-like engine settings.

    Defaults are the reference mocker's (``block_size`` 64, ``num_gpu_blocks`` 16384) and
    vLLM's (``max_num_batched_tokens`` 8192, ``max_num_seqs`` 256).
    """

    workers: int = field(default=1, validator=[_positive, _at_most(10_000)])  #: workers in the pool
    block_size: int = field(default=64, validator=_tokens)  #: tokens per KV cache block
    #: KV cache blocks per worker; null: from GPU memory with a roofline latency model, else 16384
    num_gpu_blocks: Optional[int] = field(default=None, validator=_tokens)
    max_num_batched_tokens: int = field(default=8192, validator=_tokens)  #: token budget per pass
    max_num_seqs: int = field(default=256, validator=_count)  #: running requests per pass
    #: longest request (prompt + output tokens) a worker serves, as vLLM's max_model_len (what a
    #: longer one gets: ``max_model_len_action``). null: limited only by the KV cache
    max_model_len: Optional[int] = field(default=None, validator=_tokens)
    #: a request whose prompt + output exceeds ``max_model_len``: ``cut`` its output to
    #: ``max_model_len`` - prompt (vLLM's engine stops at the length limit; the reference does
    #: too, measured), or ``reject`` it (vLLM's OpenAI server answers 400). A prompt of
    #: ``max_model_len`` tokens or more is rejected either way. On a prefill pool only the
    #: prompt counts, either way: its worker computes the prompt and the first token (Dynamo's
    #: disaggregated prefill asks for one token); the decode pool's limit governs the output
    max_model_len_action: Literal["cut", "reject"] = "cut"
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    #: GPUs of one worker are ``tensor_parallel_size`` x ``data_parallel_size``. They count
    #: GPU-hours and the planner's GPU budget; the latency model is per worker and does not
    #: change with them (give it the pass times of the whole TP x DP engine)
    tensor_parallel_size: int = field(default=1, validator=[_positive, _at_most(1024)])
    data_parallel_size: int = field(default=1, validator=[_positive, _at_most(1024)])
    #: planner only: a new worker is provisioned (counted) this long before it is routable
    startup_time_s: float = field(default=0.0, validator=_nonneg)
    #: planner only: bounds of the pool's target worker count (``max_workers`` null: only the
    #: GPU budget bounds it)
    min_workers: int = field(default=1, validator=[_non_negative, _at_most(10_000)])
    max_workers: Optional[int] = field(default=None, validator=[_positive, _at_most(10_000)])

    #: this pool's latency model when it differs from the scenario's (e.g. prefill and decode
    #: workers with different tensor_parallel_size); null: the scenario's ``latency``
    latency: Optional[LatencySpec] = None
    #: speculative decoding (null: none): see :class:`SpeculativeSpec`
    speculative: Optional[SpeculativeSpec] = None
    #: a host-memory KV tier behind the GPU cache (null: none): see :class:`KvOffloadSpec`
    kv_offload: Optional[KvOffloadSpec] = None

    #: which running request gives up its KV under memory pressure: the newest (lifo, vLLM's
    #: default) or the oldest (fifo)
    preemption_mode: Literal["lifo", "fifo"] = "lifo"
    #: the engine whose scheduler the workers follow: vllm (default), trtllm (vLLM's core with
    #: TRT-LLM's GUARANTEED_NO_EVICT capacity scheduler: a request is admitted only when its
    #: whole prompt + output fits beside what running requests still may need, so nothing is
    #: ever preempted) or sglang (see ``sglang``)
    backend: Literal["vllm", "sglang", "trtllm"] = "vllm"
    #: the engine schedules each pass while the previous one runs (vLLM's
    #: ``--async-scheduling``; SGLang's overlap scheduler and TRT-LLM's overlap scheduler work
    #: the same way): a request or handoff that reaches a worker during a pass misses the
    #: pass already formed and joins the one after (a worker that was idle takes it at once)
    async_scheduling: bool = False
    #: SGLang scheduler settings; only with ``backend: sglang``
    sglang: SglangSpec = field(factory=SglangSpec)
    #: TRT-LLM scheduler settings; only with ``backend: trtllm``
    trtllm: TrtllmSpec = field(factory=TrtllmSpec)

    def __attrs_post_init__(self) -> None:
        if self.backend != "sglang" and self.sglang != SglangSpec():
            raise ValueError("'sglang' settings apply only to backend: sglang")
        if self.sglang.enable_mixed_chunk and not self.enable_chunked_prefill:
            raise ValueError("'sglang.enable_mixed_chunk' needs 'enable_chunked_prefill': true (SGLang "
                             "mixes decodes only into chunked-prefill passes)")
        if self.backend == "sglang" and self.enable_chunked_prefill:
            chunk = self.sglang.chunked_prefill_size or SGLANG_CHUNKED_PREFILL_SIZE
            if chunk < self.block_size:
                what = ("'sglang.chunked_prefill_size'" if self.sglang.chunked_prefill_size
                        else f"the default chunk budget ({SGLANG_CHUNKED_PREFILL_SIZE}, 'sglang.chunked_prefill_size')")
                raise ValueError(f"{what} ({chunk}) must be at least 'block_size' ({self.block_size}): "
                                 "SGLang cuts a long prompt into whole pages of the chunk budget")
        if self.speculative is not None and self.speculative.verify_in_prefill and self.backend == "sglang":
            raise ValueError("'speculative.verify_in_prefill' is the reference's vLLM and TRT-LLM cores' way; "
                             "SGLang (and the reference's sglang core) emits one token when a prompt ends")
        if self.kv_offload is not None and self.backend != "vllm":
            raise ValueError(f"'kv_offload' is modelled for backend: vllm only (vLLM's OffloadingConnector), "
                             f"not {self.backend} yet")
        if self.kv_offload is not None and not self.enable_prefix_caching:
            raise ValueError("'kv_offload' needs 'enable_prefix_caching': true (a host block is found again "
                             "by its prefix identity)")
        if self.backend != "trtllm" and self.trtllm != TrtllmSpec():
            raise ValueError("'trtllm' settings apply only to backend: trtllm")
        if self.backend != "vllm" and self.preemption_mode != "lifo":
            raise ValueError(f"'preemption_mode' applies only to backend: vllm ({self.backend} "
                             "never preempts by it)")
        if self.max_workers is not None and not self.min_workers <= self.workers <= self.max_workers:
            raise ValueError(f"need min_workers ({self.min_workers}) <= workers ({self.workers}) "
                             f"<= max_workers ({self.max_workers})")
        if self.min_workers > self.workers:
            raise ValueError(f"need min_workers ({self.min_workers}) <= workers ({self.workers})")

    @property
    def gpus_per_worker(self) -> int:
        """GPUs one worker occupies: tensor_parallel_size x data_parallel_size."""
        return self.tensor_parallel_size * self.data_parallel_size


@frozen
class PoolsSpec:
    """Either ``aggregated`` (one pool serving prefill and decode) or ``prefill`` + ``decode``
    (disaggregated serving, joined by the KV handoff link)."""

    aggregated: Optional[PoolSpec] = None
    prefill: Optional[PoolSpec] = None
    decode: Optional[PoolSpec] = None

    def __attrs_post_init__(self) -> None:
        if self.aggregated is not None:
            if self.prefill is not None or self.decode is not None:
                given = " and ".join(f"'{n}'" for n in ("prefill", "decode") if getattr(self, n) is not None)
                raise ValueError(f"'aggregated' is given with {given}: a scenario has either an "
                                 "'aggregated' pool or 'prefill' and 'decode' pools")
        elif self.prefill is None or self.decode is None:
            raise ValueError("give either 'aggregated' or both 'prefill' and 'decode'")
        else:
            for name, pool in (("prefill", self.prefill), ("decode", self.decode)):
                if pool.sglang.enable_mixed_chunk:
                    raise ValueError(f"'{name}': 'sglang.enable_mixed_chunk' applies only to an aggregated "
                                     "pool (it mixes decodes into the passes that prefill)")
                if pool.sglang.prefill_decode_interval:
                    raise ValueError(f"'{name}': 'sglang.prefill_decode_interval' applies only to an "
                                     "aggregated pool (it spaces the extend passes among decode passes)")
            if self.prefill.speculative is not None:
                raise ValueError("'prefill': 'speculative' applies to the pools that decode (aggregated or "
                                 "decode); a prefill worker generates no token to draft for")
            if self.decode.kv_offload is not None:
                raise ValueError("'decode': 'kv_offload' is modelled on the pools that compute prompts "
                                 "(aggregated or prefill), not on a decode pool yet")

    @property
    def mode(self) -> str:
        """``"aggregated"`` or ``"disaggregated"``."""
        return "aggregated" if self.aggregated is not None else "disaggregated"

    def named(self) -> list[tuple[str, PoolSpec]]:
        """The pools in start order: ``[("aggregated", spec)]`` or prefill then decode."""
        if self.aggregated is not None:
            return [("aggregated", self.aggregated)]
        return [("prefill", self.prefill), ("decode", self.decode)]  # type: ignore[list-item]


