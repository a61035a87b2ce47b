"""The benchmark scripts stay runnable: each one imports and prints its usage (a script that no
longer imports is found here, not by the next person who measures)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from conftest import REPO

SCRIPTS = ["speed.py", "memory.py", "compare_reference.py", "silicon_accuracy.py",
           "aic_bucket_error.py", "calibrate_roofline.py", "silicon_harness_variants.py", "probe_reference_dp.py"]


@pytest.mark.parametrize("name", SCRIPTS)
def test_benchmark_script_prints_its_usage(name):
    if name == "calibrate_roofline.py" and importlib.util.find_spec("scipy") is None:
        pytest.skip("calibrate_roofline.py needs scipy (pip install -e '.[bench]')")
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / name), "--help"], capture_output=True,
                          text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "usage" in proc.stdout.lower()


def _silicon_rows():
    sys.path.insert(0, str(REPO / "benchmarks"))
    import silicon_rows
    return silicon_rows


def _row(source: str, backend: str, isl: int = 1024, osl: int = 1024, tp: int = 4, conc: int = 16) -> dict:
    row = {k: 0 for k in _silicon_rows().INT_COLS}
    row.update(id=f"llama_3_1_70b_h200_sxm_{backend}_fp8_agg_{isl}x{osl}_c{conc}_tp{tp}", backend=backend,
               model_path="meta-llama/Llama-3.1-70B", system="h200_sxm", precision="fp8", gemm_quant_mode="fp8",
               mode="agg", isl=isl, osl=osl, tp_size=tp, pp_size=1, attention_dp_size=1, batch_size=conc,
               silicon_data_source=f"{source}; silicon_concurrency={conc}")
    return row


def test_inferencemax_rows_get_its_client_and_server_settings():
    # InferenceMAX's scripts: benchmark_serving.py --random-range-ratio 0.8 --num-prompts
    # $((CONC * 10)); trtllm-serve --max_num_tokens 16384 and, for 1k/1k below TP 8, batch
    # waiting (20 passes, ratio 0.9); its overlap scheduler on by default
    sr = _silicon_rows()
    row = _row("source_file=2026-04-06.csv", "trtllm")
    h = sr.harness_for(row)
    assert (h.name, h.range_ratio, h.prompts_per_user, h.score_first_wave, h.kv_cache_dtype) == (
        "inferencemax", 0.8, 10, True, "fp8")
    assert h.engine == {"async_scheduling": True, "max_num_batched_tokens": 16384, "enable_chunked_prefill": False,
                        "trtllm": {"batch_wait_timeout_iters": 20, "batch_wait_max_tokens_ratio": 0.9}}
    assert "trtllm" not in sr.harness_for(_row("source_file=2026-04-06.csv", "trtllm", tp=8)).engine
    reqs = sr.client_requests(row, 16, h)
    assert len(reqs) == 160 and all(r.arrived_at == 0.0 for r in reqs)
    # ISL and OSL uniform in [int(0.8 x), x] = [819, 1024], drawn from the row id: same twice
    assert all(819 <= r.input_length <= 1024 and 819 <= r.output_length <= 1024 for r in reqs)
    assert len({r.input_length for r in reqs}) > 1
    assert [(r.input_length, r.output_length) for r in reqs] == [
        (r.input_length, r.output_length) for r in sr.client_requests(row, 16, h)]
    vllm = sr.harness_for(_row("source_file=2026-04-06.csv", "vllm"))
    assert vllm.engine == {"async_scheduling": True, "max_num_seqs": 16, "max_num_batched_tokens": 8192}
    assert vllm.kv_cache_dtype == "fp8"
    # the B200 script: --max-num-seqs 512; the H100 one sets no KV dtype (the checkpoint's bf16)
    b200 = sr.harness_for(dict(_row("source_file=2026-04-06.csv", "vllm"), system="b200_sxm"))
    assert (b200.engine["max_num_seqs"], b200.kv_cache_dtype) == (512, "fp8")
    assert sr.harness_for(dict(_row("source_file=2026-04-06.csv", "vllm"), system="h100_sxm")).kv_cache_dtype == "auto"


def test_inferencemax_mtp_rows_are_told_apart_by_their_image_and_run_its_drafts():
    # InferenceMAX's nvidia-master.yaml (Feb-Apr 2026): dsr1-fp*-b200-trt-mtp ran
    # tensorrt-llm/release:1.2.0rc6.post3, the plain dsr1-fp*-b200-trt rc6.post2; the MTP
    # scripts set num_nextn_predict_layers 3, or 1 with attention DP
    sr = _silicon_rows()
    base = dict(_row("source_file=2026-04-06.csv", "trtllm", tp=8, conc=32), system="b200_sxm",
                model_path="deepseek-ai/DeepSeek-R1", moe_ep_size=8, moe_tp_size=1,
                id="deepseek_r1_b200_sxm_trtllm_fp8_agg_1024x1024_c32_tp8")
    mtp = dict(base, silicon_data_source=base["silicon_data_source"]
               + "; image=nvcr.io#nvidia/tensorrt-llm/release:1.2.0rc6.post3")
    plain = dict(base, silicon_data_source=base["silicon_data_source"]
                 + "; image=nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc6.post2")
    a = sr.MTP_ACCEPTANCE
    assert sr.harness_for(mtp).speculative == {"method": "mtp", "num_speculative_tokens": 3,
                                               "acceptance_rates": [a, a, a], "sampling": "expected"}
    assert sr.speculative_for(dict(mtp, attention_dp_size=8))["num_speculative_tokens"] == 1
    assert sr.harness_for(plain).speculative is None
    # the same image on another GPU, engine or model is not an MTP configuration
    assert sr.speculative_for(dict(mtp, system="h200_sxm")) is None
    assert sr.speculative_for(dict(mtp, model_path="meta-llama/Llama-3.1-70B")) is None
    assert sr.scenario_for(mtp, 32)["pools"]["aggregated"]["speculative"]["num_speculative_tokens"] == 3
    assert "speculative" not in sr.scenario_for(plain, 32)["pools"]["aggregated"]
    # the drafts pay on this weight-bound deployment: TPOT below the same server without them
    h = sr.harness_for(mtp)
    small = dict(mtp, isl=128, osl=64)
    _, with_mtp = sr.simulate_row(small, 4, harness=sr.replace(h, prompts_per_user=2))
    _, without = sr.simulate_row(small, 4, harness=sr.replace(h, prompts_per_user=2, speculative=None))
    assert with_mtp < 0.8 * without  # 4.19 against 5.69 ms: 2.53 tokens a round at 0.7, minus the drafts


def test_nvidia_gap_rows_keep_fixed_lengths_and_the_engine_defaults():
    sr = _silicon_rows()
    src = "source_file=/x/aic-auto-gap-analysis/data/h200_sxm/vllm/0.12.0/m.csv"
    h = sr.harness_for(_row(src, "vllm"))
    assert (h.name, h.range_ratio, h.prompts_per_user, h.score_first_wave) == ("nvidia", 1.0, 3, False)
    # desynchronized users where the family's calibration rows say so (H200 vLLM), else lockstep
    assert h.desync and not sr.harness_for(dict(_row(src, "trtllm"), system="h100_sxm")).desync
    # aiperf's 10 x C and 20 x C prompts, the burst scored, where the calibration rows chose them
    h100 = {b: sr.harness_for(dict(_row(src, b), system="h100_sxm")) for b in ("vllm", "trtllm", "sglang")}
    assert [(h.prompts_per_user, h.score_first_wave) for h in h100.values()] == [(10, True), (20, True), (3, False)]
    assert h.engine == {"async_scheduling": False}
    assert sr.harness_for(_row(src, "sglang")).engine == {"async_scheduling": True}
    reqs = sr.client_requests(_row(src, "vllm"), 16, h)
    assert len(reqs) == 48 and {(r.input_length, r.output_length) for r in reqs} == {(1024, 1024)}
    # a closed loop of 16 users: each a chain of 3 prompts, the next sent when the last ends
    assert [(r.session, r.deps, r.arrived_at) for r in reqs[:4]] == [
        (0, (), 0.0), (0, (0,), 0.0), (0, (1,), 0.0), (1, (), 0.0)]
    assert sum(not r.deps for r in reqs) == 16
    staggered = sr.client_requests(_row(src, "vllm"), 16, sr.replace(h, stagger_s=1.6))
    assert [r.arrived_at for r in staggered if not r.deps][:3] == [0.0, 0.1, 0.2]  # user u at u/16 x 1.6 s
    assert "max_in_flight" not in sr.scenario_for(_row(src, "vllm"), 16)["workload"]
    # a client turnaround: each prompt waits up to 50 ms before it is sent (the first from time 0,
    # the others after the user's last prompt ends), the same draws on every call
    thinking = sr.client_requests(_row(src, "vllm"), 16, sr.replace(h, think_ms=50.0))
    waits = [r.arrived_at if not r.deps else r.delay_s for r in thinking]
    assert all(0.0 <= w < 0.05 for w in waits) and len(set(waits)) == 48
    assert waits == [r.arrived_at if not r.deps else r.delay_s
                     for r in sr.client_requests(_row(src, "vllm"), 16, sr.replace(h, think_ms=50.0))]


def test_h100_llama_8b_trtllm_rows_run_one_slot_short_of_their_users():
    # GAP_ANALYSIS_CLIENTS keys (system, backend, model) before (system, backend): the H100
    # Llama-3.1-8B TRT-LLM calibration rows chose a server one slot short of the users; the
    # family's Qwen3-32B rows keep as many slots as users
    sr = _silicon_rows()
    src = "source_file=/x/aic-auto-gap-analysis/data/h100_sxm/trtllm/1.0.0rc3/m.csv"

    def row(model: str, osl: int) -> dict:
        return dict(_row(src, "trtllm", osl=osl, tp=2, conc=8), system="h100_sxm", model_path=model,
                    precision="bf16", gemm_quant_mode="bf16")

    llama, qwen = row("meta-llama/Llama-3.1-8B-Instruct", 64), row("Qwen/Qwen3-32B", 64)
    h = sr.harness_for(llama)
    assert (h.prompts_per_user, h.score_first_wave, h.slots_short) == (20, True, 1)
    assert sr.harness_for(qwen).slots_short == 0
    pool = sr.scenario_for(llama, 8)["pools"]["aggregated"]
    assert (pool["workers"], pool["max_num_seqs"]) == (1, 7)
    assert sr.scenario_for(qwen, 8)["pools"]["aggregated"]["max_num_seqs"] == 8
    # the signature it models: in lockstep the eighth user waits a whole E2E for a slot each
    # wave, so the mean TTFT grows by about E2E / C with the output length (192 more tokens at
    # TPOT t: 192 t / 8 more); with 8 slots it does not grow at all
    short = {osl: sr.simulate_row(row(llama["model_path"], osl), 8) for osl in (64, 256)}
    full = {osl: sr.simulate_row(row(llama["model_path"], osl), 8, harness=sr.replace(h, slots_short=0))
            for osl in (64, 256)}
    growth, per_user = short[256][0] - short[64][0], 192 * short[256][1] / 8
    assert 0.8 * per_user < growth < 1.3 * per_user
    assert full[256][0] == pytest.approx(full[64][0], rel=1e-9)


def test_families_with_their_own_client_get_it_and_only_they():
    # GAP_ANALYSIS_CLIENTS' (system, backend, model) keys chosen on each family's calibration
    # rows: H200 Llama-3.1-8B vLLM runs bench_run.sh as written (warm-up, 100 dataset entries,
    # prefix caching on); the same engine's other models keep the family's client
    sr = _silicon_rows()
    vllm = "source_file=/x/aic-auto-gap-analysis/data/h200_sxm/vllm/0.12.0/m.csv"
    fp8 = dict(_row(vllm, "vllm", isl=1000, osl=100, tp=1, conc=16),
               model_path="nvidia/Llama-3.1-8B-Instruct-FP8")
    h = sr.harness_for(fp8)
    assert (h.warmup_per_user, h.dataset_entries, h.prompts_per_user) == (2, 100, 10)
    assert h.score_first_wave and h.desync == 0.0
    assert h.engine == {"async_scheduling": False, "enable_prefix_caching": True}
    assert sr.scenario_for(fp8, 16)["pools"]["aggregated"]["enable_prefix_caching"] is True
    reqs = sr.client_requests(fp8, 16, h)
    # 2 warm-up and 10 scored prompts per user, each one of the 100 entries
    assert len(reqs) == 16 * 12 and len({r.hash_ids for r in reqs}) <= 100
    other = sr.harness_for(_row(vllm, "vllm"))  # Llama-3.1-70B on the same engine
    assert (other.desync, other.dataset_entries) == (1.0, 0)
    assert sr.scenario_for(_row(vllm, "vllm"), 16)["pools"]["aggregated"]["enable_prefix_caching"] is False


def test_aiconfigurator_generated_server_flags():
    # generated_flags: the server flags aiconfigurator's generator writes for the row
    sr = _silicon_rows()
    trt = "source_file=/x/aic-auto-gap-analysis/data/h100_sxm/trtllm/1.0.0rc3/m.csv"
    qwen = dict(_row(trt, "trtllm", isl=4000, osl=500, tp=2, conc=32), system="h100_sxm",
                model_path="Qwen/Qwen3-32B", precision="bf16", gemm_quant_mode="bf16")
    h = sr.harness_for(qwen)
    assert not h.generated_flags
    assert sr.scenario_for(qwen, 32)["pools"]["aggregated"]["max_num_batched_tokens"] == 8192
    pool = sr.scenario_for(qwen, 32, harness=sr.replace(h, generated_flags=True))["pools"]["aggregated"]
    # max_num_tokens = batch + ISL + 1500 = 32 + 4000 + 1500, whole prompts (no chunking)
    assert (pool["max_num_batched_tokens"], pool["enable_chunked_prefill"]) == (5532, False)
    assert sr.aiconfigurator_flags(dict(qwen, backend="vllm")) == {"max_num_batched_tokens": 5532}
    assert sr.aiconfigurator_flags(dict(qwen, backend="sglang"))["sglang"]["max_prefill_tokens"] == 5500


def test_aiperf_warm_up_and_dataset_reuse_in_the_client():
    # aiconfigurator's bench_run.sh: a 2 x C warm-up, then the scored burst once every warm-up
    # response is in; every prompt one of aiperf's N dataset entries (its default 100; 5 here, so
    # that 20 prompts repeat some), drawn with replacement
    sr = _silicon_rows()
    src = "source_file=/x/aic-auto-gap-analysis/data/h200_sxm/vllm/0.12.0/m.csv"
    row = _row(src, "vllm", isl=200, osl=8, conc=4)
    h = sr.harness_for(row)
    h = sr.replace(h, prompts_per_user=3, warmup_per_user=2, dataset_entries=5, desync=0.0,
                   engine={**h.engine, "enable_prefix_caching": True})
    reqs = sr.client_requests(row, 4, h)
    assert [r.rid for r in reqs] == list(range(20))  # 8 warm-up, then 12 scored
    # warm-up chains: user u's two prompts are rids 2u and 2u + 1
    assert [r.deps for r in reqs[:8]] == [(), (0,), (), (2,), (), (4,), (), (6,)]
    # each user's first scored prompt waits for the end of every warm-up chain
    assert {reqs[8 + 3 * u].deps for u in range(4)} == {(1, 3, 5, 7)}
    assert reqs[9].deps == (8,) and reqs[10].deps == (9,)
    # 200 tokens in 64-token blocks: 4 ids, the same 4 for two prompts of one dataset entry
    entries = [r.hash_ids[0] >> 20 for r in reqs]
    assert all(len(r.hash_ids) == 4 and r.hash_block_size == 64 for r in reqs)
    assert set(entries) <= set(range(5))
    assert entries == [r.hash_ids[0] >> 20 for r in sr.client_requests(row, 4, h)]  # seeded by row id
    assert all(r.hash_ids == tuple(e << 20 | j for j in range(4)) for r, e in zip(reqs, entries))
    # the warm-up is not scored: the scored means are over the 12 others (the burst included)
    records = sr.simulate(sr.scenario_from_dict(sr.scenario_for(row, 4, harness=h), source=row["id"]), reqs,
                          record_token_times=False)
    assert [r.rid for r in sr._scored(records, sr.replace(h, score_first_wave=True), 4)] == list(range(8, 20))
    assert [r.rid for r in sr._scored(records, h, 4)] == [9, 10, 12, 13, 15, 16, 18, 19]
    # the burst starts when the last warm-up prompt ends
    done = {r.rid: r for r in records.requests}
    assert min(done[8 + 3 * u].arrived_at for u in range(4)) == max(done[w].finished_at for w in (1, 3, 5, 7))
    # with the server's prefix cache on, a prompt whose entry an earlier, finished prompt sent
    # reuses its 3 whole blocks (192 tokens; the 8-token tail is computed); a first copy none
    seen, repeats = set(), 0
    for r in sorted(records.requests, key=lambda r: r.arrived_at):
        e = entries[r.rid]
        hit = any(entries[o.rid] == e and o.finished_at <= r.arrived_at
                  for o in records.requests if o.rid != r.rid)
        assert r.cached_tokens == (192 if hit else 0) or (not hit and e in seen)
        repeats += hit
        seen.add(e)
    assert repeats > 0


@pytest.mark.parametrize("script, args", [
    ("silicon_accuracy.py", ["--quiet"]),
    ("silicon_harness_variants.py", []),
])
@pytest.mark.parametrize("content", [None, "a,b\n1,2\n", b"\xde\xad\xbe\xef" * 40])
def test_silicon_scripts_refuse_a_bad_csv_in_one_line(tmp_path, script, args, content):
    # a missing file, a CSV without the columns, bytes that are not text: one line, exit 2
    path = tmp_path / "rows.csv"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), "--silicon", str(path), *args],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and str(path) in proc.stderr


@pytest.mark.parametrize("args, message", [
    (["--peer-python", "/nonexistent"], "--peer-python /nonexistent: not an executable file"),
    (["--peer-python", sys.executable, "--probes", ""], "--probes: none given"),
    (["--peer-python", sys.executable, "--probes", "lockstep,nope"], "--probes: unknown nope"),
])
def test_reference_dp_probe_refuses_bad_arguments_in_one_line(args, message):
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "probe_reference_dp.py"), *args],
                          capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_reference_dp_probe_with_a_program_that_is_not_the_reference(tmp_path):
    # /bin/true "runs" the harness and writes nothing: one line, exit 1, the probe's folder gone
    # (without ../shared the harness itself is missing: exit 2, one line)
    peer = REPO.parent / "shared" / "tools" / "dynamo_peer.py"
    script = str(REPO / "benchmarks" / "probe_reference_dp.py")
    proc = subprocess.run([sys.executable, script, "--peer-python", "/bin/true", "--out", str(tmp_path),
                           "--probes", "lockstep"],
                          capture_output=True, text=True, cwd=REPO, timeout=60)
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    if peer.exists():
        assert proc.returncode == 1 and "it wrote no per_request.jsonl" in proc.stderr
        assert not (tmp_path / "lockstep_0").exists()
    else:
        assert proc.returncode == 2 and "dynamo_peer.py not found" in proc.stderr


def test_harness_variants_refuses_an_unknown_variant():
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "silicon_harness_variants.py"),
                           "--variants", "current,nope"], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith("--variants: unknown nope (expected: current, steady3")


def test_moe_rows_never_set_a_dense_overhead_fit():
    # group_fits with a fit that reports which rows it was given: a GPU with 10 dense rows gets
    # its "all" fit from them alone; one with 3 dense and 30 MoE rows gets no dense fit ("all"
    # and its engine's absent: the other GPUs' median, pooled_overheads) and a MoE one of its
    # 30 MoE rows; an engine with 12 dense rows gets its own fit of those
    if importlib.util.find_spec("scipy") is None:
        pytest.skip("calibrate_roofline.py needs scipy (pip install -e '.[bench]')")
    sys.path.insert(0, str(REPO / "benchmarks"))
    import calibrate_roofline as cr

    def item(backend, moe, depth=32):
        return (backend, moe, 10.0, depth, 8, 0, 11.0, False)

    def fit(items, layer_us=None):
        terms = dict.fromkeys(cr.OVERHEADS, 1.0 if all(not it[1] for it in items) else 9.0)
        return terms, len(items), layer_us

    samples = {"H100": [item("vllm", False, 32 + i % 2) for i in range(12)],
               "GB200": [item("trtllm", False) for _ in range(3)] + [item("trtllm", True) for _ in range(30)]}
    fits = cr.group_fits(samples, fit)
    assert fits["H100"]["all"][:2] == (dict.fromkeys(cr.OVERHEADS, 1.0), 12)
    assert fits["H100"]["vllm"][:2] == (dict.fromkeys(cr.OVERHEADS, 1.0), 12)
    assert "vllm/moe" not in fits["H100"]
    assert set(fits["GB200"]) == {"trtllm/moe"}
    assert fits["GB200"]["trtllm/moe"][:2] == (dict.fromkeys(cr.OVERHEADS, 9.0), 30)
    # one model depth: the per-layer time is held at the pooled dense median (1.0), not a MoE fit's
    assert fits["GB200"]["trtllm/moe"][2] == 1.0
    assert cr.pooled_overheads(fits) == dict.fromkeys(cr.OVERHEADS, 1.0)
    assert cr.pooled_overheads({"GB200": fits["GB200"]}) == dict.fromkeys(cr.OVERHEADS, 0.0)
