"""The reference's rules beyond the scheduler basics, each checked on the reference
(ai-dynamo-runtime 1.6.1, tiny traces, measured values in the comments), and the cases where
simkit keeps the real engine's behaviour instead (README, known differences).

Times in ms; P(n) and D(a) are the reference polynomial (REFERENCE.md s4, ``conftest``).
"""

from __future__ import annotations

import pytest

from simkit import scenario_from_dict
from simkit.core.request import Request
from simkit.engine.scheduler.sglang import SglangScheduler
from simkit.sim import simulate

from conftest import D, P


def ms(seconds):
    return None if seconds is None else seconds * 1000


def run(reqs, mode="aggregated", link=None, **pool):
    """``reqs`` on one worker (or one prefill + one decode) of the reference's engine."""
    engine = dict({"workers": 1}, **pool)
    data = {"latency": {"kind": "polynomial", "prefill_tokens_from_batch_means": True}}
    if engine.get("backend") == "sglang":  # the reference's way (README, known differences)
        engine.setdefault("sglang", {})["budgets_count_chunks"] = True
    if mode == "aggregated":
        data["pools"] = {"aggregated": engine}
    else:
        data["pools"] = {"prefill": engine, "decode": dict(engine)}
        data["link"] = link or {"bandwidth_gb_per_s": None, "sharing": "uncontended"}
    return simulate(scenario_from_dict(data), reqs, record_passes=True)


# ----------------------------------------------------------------------------- SGLang

def test_sglang_new_token_ratio_decays_on_decode_passes_only():
    # SGLang's update_running_batch decays the ratio when it runs a decode batch; an extend
    # (prefill) pass leaves it. init 0.7, floor 0.7 * 0.14 = 0.098, step (0.7 - 0.098) / 600
    spec = scenario_from_dict({"pools": {"aggregated": {"backend": "sglang"}}}).pools.aggregated
    sched = SglangScheduler(spec, "aggregated")
    sched.add(sched.make_seq(Request(0, 0.0, 100, 5)))
    extend = sched.schedule()
    assert extend.prefill_requests == 1 and sched.new_token_ratio == 0.7  # no decay
    sched.complete(extend)
    decode = sched.schedule()
    assert decode.decode_requests == 1 and sched.new_token_ratio == 0.7 - (0.7 - 0.098) / 600
    sched.complete(decode)
    sched.add(sched.make_seq(Request(1, 0.0, 100, 5)))
    assert sched.schedule().prefill_requests == 1  # another extend: the ratio stays
    assert sched.new_token_ratio == 0.7 - (0.7 - 0.098) / 600


def test_sglang_ratio_decay_as_the_reference_on_a_small_cache():
    # 12 requests on one SGLang worker of 64 16-token pages: admissions hinge
    # on the running requests' reserve (new_token_ratio x remaining output). Measured on the
    # reference; with the ratio decaying on extend passes too, 7 of these times differ
    rows = [(0, 57, 213, [1000, 1001, 1002, 100000]), (0, 96, 57, range(100100, 100106)),
            (0, 160, 12, [1000, 1001, 1002, 1003, 1004, 100200, 100201, 100202, 100203, 100204]),
            (0, 128, 49, [1000] + list(range(100300, 100307))), (0, 176, 9, [0, 1, 2, 3] + list(range(100400, 100407))),
            (0.392, 32, 1, [0, 1]), (0.392, 112, 47, [0, 1, 2, 100600, 100601, 100602, 100603]),
            (0.392, 160, 257, [0, 1, 2, 3, 4, 5, 100700, 100701, 100702, 100703]), (31.247, 96, 1, range(6)),
            (31.247, 144, 252, [1000, 1001, 1002, 1003] + list(range(100900, 100905))),
            (31.247, 160, 33, range(101000, 101010)), (31.247, 4, 31, [1000])]
    reqs = [Request(i, at / 1000, isl, osl, tuple(ids), 16) for i, (at, isl, osl, ids) in enumerate(rows)]
    reference = [(25.998468, 6621.550439), (25.998468, 1734.708592), (25.998468, 382.213876),
                 (25.998468, 1536.374264), (25.998468, 296.358113), (43.325258, 43.325258),
                 (43.325258, 1477.971903), (399.784786, 8321.382548), (385.674249, 385.674249),
                 (1721.180382, 9173.765121), (2071.435345, 3065.912181), (3082.474341, 3979.161952)]
    records = run(reqs, backend="sglang", block_size=16, num_gpu_blocks=64, max_num_batched_tokens=256)
    for r, (ttft, e2e) in zip(records.requests, reference):
        assert ms(r.ttft_s) == pytest.approx(ttft, rel=1e-6) and ms(r.e2e_s) == pytest.approx(e2e, rel=1e-6)


def test_sglang_chunk_budget_is_8192_whatever_max_num_batched_tokens():
    # a 2,000-token prompt with max_num_batched_tokens 256: SGLang (and the reference) extends
    # it in one pass, P(2000) = 48.552296 ms measured; vLLM in chunks of 256: 7 P(256) + P(208)
    # = 162.589587 ms measured
    r = [Request(0, 0.0, 2000, 2, (1, 2, 3, 4), 512)]
    sg = run(r, backend="sglang", max_num_batched_tokens=256).requests[0]
    assert ms(sg.ttft_s) == pytest.approx(P(2000), rel=1e-9) == pytest.approx(48.552296, rel=1e-6)
    vl = run(r, max_num_batched_tokens=256).requests[0]
    assert ms(vl.ttft_s) == pytest.approx(7 * P(256) + P(208), rel=1e-9) == pytest.approx(162.589587, rel=1e-6)


@pytest.mark.parametrize("gpu, chunk", [("H100", 8192), ("H200", 8192), ("B200", 16384), ("B300", 16384)])
def test_sglang_chunk_budget_follows_gpu_memory_when_a_gpu_is_named(gpu, chunk):
    # SGLang's rule: 16384 above 160 GiB of GPU memory (B200 180 GiB), else 8192 (H200 141 GiB)
    s = scenario_from_dict({"latency": {"kind": "roofline", "model": "Llama-3.1-8B", "gpu": gpu},
                            "pools": {"aggregated": {"backend": "sglang"}}})
    assert s.pools.aggregated.sglang.chunked_prefill_size == chunk


# ----------------------------------------------------------------------------- requests

def test_output_length_zero_has_no_ttft_and_no_e2e():
    # measured: a 600-token prompt asking 0 tokens completes at P(600) = 25.763044 ms with TTFT
    # and E2E null; beside it a 1-token request has TTFT = E2E
    records = run([Request(0, 0.0, 600, 0, (1, 11), 512), Request(1, 0.001, 100, 1, (2,), 512)])
    r0, r1 = records.requests
    assert (r0.status, r0.ttft_s, r0.e2e_s) == ("completed", None, None)
    assert ms(r0.finished_at) == pytest.approx(25.763044, rel=1e-6)
    assert r1.ttft_s == r1.e2e_s


def test_max_model_len_cuts_the_output_as_the_reference():
    # measured with max_model_len 1000: (600, 600) generates 400 tokens; (1000, 5) and (1200, 5)
    # are rejected; (999, 5) generates 1; (990, 20) generates 10
    reqs = [Request(0, 0.0, 600, 600, (1, 11), 512), Request(1, 0.001, 1000, 5, (2, 3), 512),
            Request(2, 0.002, 1200, 5, (4, 5, 6), 512), Request(3, 0.003, 999, 5, (7, 8), 512),
            Request(4, 0.004, 990, 20, (9, 10), 512)]
    records = run(reqs, max_model_len=1000)
    assert [(r.status, r.output_length) for r in records.requests] == [
        ("completed", 400), ("rejected", 0), ("rejected", 0), ("completed", 1), ("completed", 10)]


# ----------------------------------------------------------------------------- disaggregation

def test_uncontended_link_moves_every_transfer_at_full_bandwidth():
    # two 1,000-token prompts prefilled together (one pass, P(2000) = 48.552296 ms) cross a
    # 1 GB/s link at 131,072 bytes per token: 131.072 ms each. Uncontended (the reference's
    # handoff, measured: both activated at 179.624296 ms, first tokens at 185.467218 ms),
    # both arrive at 48.552296 + 131.072; through one channel the second waits for the first
    link = {"bandwidth_gb_per_s": 1.0, "kv_bytes_per_token": 131072}
    reqs = [Request(0, 0.0, 1000, 3, (1, 2), 512), Request(1, 0.0, 1000, 3, (3, 4), 512)]
    free = run(reqs, mode="disaggregated", link=dict(link, sharing="uncontended")).requests
    assert [ms(r.handed_off_at) for r in free] == pytest.approx([P(2000) + 131.072] * 2, rel=1e-9)
    assert [ms(r.ttft_s) for r in free] == pytest.approx([185.467218] * 2, rel=1e-6)
    queued = run(reqs, mode="disaggregated", link=dict(link, sharing="channels")).requests
    assert sorted(ms(r.handed_off_at) for r in queued) == pytest.approx(
        [P(2000) + 131.072, P(2000) + 2 * 131.072], rel=1e-9)


def test_the_prefill_side_frees_a_prompt_when_the_decode_side_admits_it():
    # prefill worker of 40 64-token blocks, budget 2,048: A (1,000 tokens) and C (1,300) share
    # pass 1 (A whole, C's first 1,048: P(2048) = 49.362902 ms); B (600, 10 blocks) arrives at
    # 1 ms and needs A's 16 blocks back. The idle decode worker admits A at 49.36 ms, which
    # frees A on the prefill side before that worker forms pass 2, so B joins pass 2 (measured:
    # B admitted at 49.362902 ms, B and C held for handoff at 79.106218 ms)
    reqs = [Request(0, 0.0, 1000, 5, (1, 2), 512), Request(1, 0.0, 1300, 5, (3, 4, 5), 512),
            Request(2, 0.001, 600, 5, (6, 7), 512)]
    a, c, b = run(reqs, mode="disaggregated", num_gpu_blocks=40, max_num_batched_tokens=2048).requests
    assert ms(a.prefilled_at) == pytest.approx(P(2048), rel=1e-9) == pytest.approx(49.362902, rel=1e-6)
    assert ms(b.first_admitted_at) == pytest.approx(49.362902, rel=1e-6)
    assert ms(b.prefilled_at) == ms(c.prefilled_at) == pytest.approx(79.106218, rel=1e-6)


# ----------------------------------------------------------------------------- known differences

def two_growing(**pool):
    """Two 255/256-token prompts asking 200 tokens each in 10 blocks of 64 (640 tokens): they
    outgrow the cache and the newer one is preempted (or retracted) once."""
    return [Request(0, 0.0, 256, 200, (1, 2, 3, 4), 64), Request(1, 0.0, 255, 200, (5, 6, 7, 8), 64)]


def test_known_difference_a_resumed_preempted_request_recomputes_its_generated_tokens():
    # vLLM recomputes a preempted request's prompt + generated tokens not in the prefix cache.
    # B (255 tokens) is preempted at 2162.84 ms after 65 tokens; when A ends at 6068.07 ms B
    # comes back hitting 2 of its prompt blocks: 255 + 65 - 128 = 192 tokens, one P(192) pass.
    # The reference prices that pass as the uncached prompt only plus a decode step (its 65
    # tokens' KV as if kept): B's last token 9961.61 ms here, 9986.93 ms there (measured)
    records = run(two_growing(), num_gpu_blocks=10)
    resume = [p for p in records.pass_log if p.admitted and p.start_at > 1][0]
    assert (resume.prefill_tokens, resume.decode_requests) == (192, 0)
    assert ms(resume.end_at - resume.start_at) == pytest.approx(P(192), rel=1e-9)
    assert ms(records.requests[1].last_token_at) == pytest.approx(9961.614514, rel=1e-9)


def test_known_difference_a_decode_worker_recomputes_a_preempted_request():
    # the same on a decode worker (disaggregated): simkit recomputes B there (P(192), B's last
    # token 9994.07 ms); the reference prices B's return as one decode step with no recompute
    # at all (10000.95 ms, measured)
    records = run(two_growing(), mode="disaggregated", num_gpu_blocks=10)
    resume = [p for p in records.pass_log if p.pool == "decode" and p.admitted and p.start_at > 1][0]
    assert (resume.prefill_tokens, resume.decode_requests) == (192, 0)
    assert ms(records.requests[1].last_token_at) == pytest.approx(9994.068810, rel=1e-9)


def test_known_difference_a_retracted_sglang_request_hits_only_its_prompt_pages():
    # SGLang frees a retracted request's pages without inserting its generated tokens into the
    # radix tree: it comes back hitting its 4 prompt pages (256 tokens) and recomputes its 63
    # generated tokens + the next: a 64-token extend pass. The reference re-hits pages holding
    # generated tokens too (measured: A's last token 9997.66 ms there, 9971.32 ms here)
    records = run(two_growing(), backend="sglang", num_gpu_blocks=10, sglang={"clip_max_new_tokens": 16})
    resume = [p for p in records.pass_log if p.admitted and p.start_at > 1][0]
    assert (resume.prefill_tokens, resume.preempted) == (64, 0)
    assert ms(records.requests[0].last_token_at) == pytest.approx(9971.320416, rel=1e-9)


def test_known_difference_a_request_that_can_never_fit_is_rejected_not_an_aborted_replay():
    # a 500-token prompt asking 200 tokens in a 640-token cache: it fits, prompt + output does
    # not. The reference aborts its whole replay ("replay invariant violated: effect-free
    # zero-duration pass", measured); simkit rejects the request, counts it, and goes on
    reqs = [Request(0, 0.0, 500, 200, tuple(range(1, 9)), 64), Request(1, 0.0, 100, 5, (20, 21), 64)]
    for backend in ("vllm", "sglang"):
        records = run(reqs, backend=backend, num_gpu_blocks=10)
        assert [r.status for r in records.requests] == ["rejected", "completed"]


# ----------------------------------------------------------------------------- TRT-LLM full reuse

def _req(rid, at_ms, isl, osl, ids, tbs):
    return Request(rid, at_ms / 1000.0, isl, osl, tuple(ids), tbs)


def test_trtllm_prefill_worker_hands_a_fully_cached_prompt_over_at_no_cost():
    """Disaggregated TRT-LLM: a prompt whose every block the prefill worker caches computes
    nothing there. Measured: a 48-token prompt (3 blocks of 16) seen before has TTFT 5.749889 ms
    = the decode worker's first step D(48) alone (C = 16384 x 16); beside a 101-token prompt it
    rides in that prompt's pass, which is priced as that prompt alone (P(101), not the batch-mean
    price of two prompts): TTFT 23.809932 ms."""
    C = 16384 * 16
    first = [_req(0, 0, 48, 5, [1, 2, 3], 16)]
    recs = run(first + [_req(1, 100, 48, 5, [1, 2, 3], 16)], mode="disaggregated", backend="trtllm",
               block_size=16, num_gpu_blocks=16384).requests
    assert ms(recs[1].ttft_s) == pytest.approx(D(48, C), abs=1e-6)  # 5.749889 measured
    recs = run(first + [_req(1, 100, 48, 5, [1, 2, 3], 16), _req(2, 100, 101, 5, range(7, 14), 16)],
               mode="disaggregated", backend="trtllm", block_size=16, num_gpu_blocks=16384).requests
    # both prompts done at P(101); then each one's first step on the decode worker, together
    assert ms(recs[1].ttft_s) == ms(recs[2].ttft_s) == pytest.approx(23.809932, abs=1e-5)
    assert ms(recs[2].ttft_s) - P(101) == pytest.approx(D(48 + 101, C), abs=1e-5)


def test_trtllm_a_fully_cached_prompt_joins_a_pass_whose_budget_is_spent_after_the_prompts_that_compute():
    """Aggregated TRT-LLM, budget 256 tokens, blocks of 32. A cached 64-token prompt S arrives
    with a new 352-token prompt X behind it: X still gets a 256-token chunk and S its one-token
    step in the same pass (measured TTFT of S = P(256) + D(64)); of two cached prompts behind
    X's chunk, one joins that pass, the other the next (measured, reference 1.6.1)."""
    C = 16384 * 32
    seen = _req(0, 0, 64, 1, [1], 64)
    x = [50, 51, 52, 53, 54, 55]
    recs = run([seen, _req(1, 100, 64, 3, [1], 64), _req(2, 100, 352, 3, x, 64)], backend="trtllm",
               block_size=32, num_gpu_blocks=16384, max_num_batched_tokens=256).requests
    assert ms(recs[1].ttft_s) == pytest.approx(P(256) + D(64, C), abs=1e-6)
    recs = run([seen, _req(1, 100, 352, 3, x, 64), _req(2, 100, 64, 3, [1], 64), _req(3, 100, 64, 4, [1], 64)],
               backend="trtllm", block_size=32, num_gpu_blocks=16384, max_num_batched_tokens=256).requests
    first_pass = P(256) + D(64, C)
    assert ms(recs[2].ttft_s) == pytest.approx(first_pass, abs=1e-6)
    assert ms(recs[3].ttft_s) > first_pass + 1.0  # the next pass


def test_trtllm_a_fully_cached_prompt_set_aside_keeps_its_seat_in_its_turn():
    """Aggregated TRT-LLM, max_num_seqs 2, one request decoding: at 100 ms a cached 48-token
    prompt A and a new 64-token prompt B arrive, A first. One seat is left, and A takes it in
    its turn though its one-token step is placed after the prompts that compute: admitted at the
    pass boundary after 100 ms, first token one decode pass later; B gets the seat A frees.
    (Measured on the reference 1.6.1: A admitted at 104.529726 ms, first token 110.296092; B
    admitted at 110.296092, first token 133.527663. Before, A was set aside without its seat and
    B took it: B's first token came first.)"""
    recs = run([_req(0, 0, 64, 200, [1, 2, 3, 4], 16), _req(1, 0, 48, 1, [10, 11, 12], 16),
                _req(2, 100, 48, 1, [10, 11, 12], 16), _req(3, 100, 64, 1, [20, 21, 22, 23], 16)],
               backend="trtllm", block_size=16, num_gpu_blocks=16384, max_num_seqs=2).requests
    a, b = recs[2], recs[3]
    assert ms(a.first_admitted_at) == pytest.approx(104.529726, abs=1e-5)
    assert ms(a.first_token_at) == pytest.approx(110.296092, abs=1e-5)
    assert ms(b.first_admitted_at) == pytest.approx(ms(a.first_token_at), abs=1e-9)
    assert ms(b.first_token_at) == pytest.approx(133.527663, abs=1e-5)
