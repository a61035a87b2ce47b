"""Roofline latency model, model/GPU package data, KV capacity and the step CLI: values by hand."""

from __future__ import annotations

import attrs
import pytest

from simkit.cli import main
from simkit import scenario_from_dict
from simkit.spec import ConfigError, RooflineLatency
from simkit.engine.latency import RooflineModel
from simkit.engine.hardware import (Calibration, GpuSpec, HardwareError, ModelArch, load_gpu, load_model,
                             model_names)
from simkit.sim import simulate
from simkit.core.request import Request

# a one-layer toy: attention params 1024*(8+16)*128 + 8*128*1024 = 4,194,304; MLP 3*1024*4096
# = 12,582,912; 2^24 = 16,777,216 GEMM params; LM head 1024*1000
TOY = ModelArch(name="toy", num_layers=1, hidden_size=1024, num_heads=8, num_kv_heads=8, head_dim=128,
                intermediate_size=4096, vocab_size=1000)
GPU = GpuSpec(name="toy", memory_bytes=80 * 10**9, hbm_gb_per_s=1000.0, dense_tflops={"bf16": 100.0},
              gpus_per_node=8, intra_node_gb_per_s=100.0, inter_node_gb_per_s=10.0, p2p_latency_us=0.0,
              source="test")
IDEAL = Calibration(gemm_compute_eff=1.0, gemm_memory_eff=1.0, attention_compute_eff=1.0,
                    attention_memory_eff=1.0, comm_eff=1.0, allreduce_latency_us=0.0,
                    layer_overhead_us=0.0, pass_overhead_ms=1.0)


def toy(tp=1):
    return RooflineModel(RooflineLatency(tensor_parallel_size=tp), arch=TOY, gpu=GPU, calibration=IDEAL)


def test_toy_decode_pass_by_hand():
    # one request, 1000 tokens of context, TP 1, bf16, peak 1e14 FLOP/s, 1e12 B/s:
    # GEMM     bytes 2^24 * 2 = 33,554,432 B -> 33.554432 us (compute 2 * 2^24 / 1e14 = 0.34 us)
    # LM head  bytes 1,024,000 * 2 -> 2.048 us
    # elementwise 2 * (6 * 1024 + 3 * 4096) = 36,864 B -> 0.036864 us
    # attention 1000 tokens * 2 * 8 * 128 values * 2 B = 4,096,000 B -> 4.096 us (FLOPs 0.04 us)
    # overhead 1 ms;   total 1039.735296 us
    m = toy()
    assert m.pass_time_s(0, 1, 1000) == pytest.approx(1039.735296e-6, rel=1e-12)
    bounds = {op.name: op.bound for op in m.breakdown(0, 1, 1000)}
    assert bounds == {"gemm": "memory", "lm_head": "memory", "elementwise": "memory",
                      "attention_decode": "memory", "overhead": "fixed"}


def test_toy_prefill_pass_by_hand_and_tp():
    # 8192 prompt tokens of one fresh prompt, TP 1:
    # GEMM      2 * 8192 * 2^24 FLOP = 2.748779069e11 -> 2748.779069 us (compute-bound)
    # attention pairs 8192 * 8193 / 2 = 33,558,528; * 4 * 128 * 8 FLOP = 1.37455731e11 -> 1374.557 us
    # LM head   2.048 us (memory); elementwise 36,864 * 8192 B -> 301.989888 us; overhead 1000 us
    m = toy()
    expected_us = 2748.779069 + 1374.55731 + 2.048 + 301.989888 + 1000
    assert m.pass_time_s(8192, 0, 0) == pytest.approx(expected_us * 1e-6, rel=1e-8)
    gemm = {op.name: op for op in m.breakdown(8192, 0, 0)}["gemm"]
    assert gemm.bound == "compute"
    # TP 2 halves GEMM and attention compute and adds two all-reduces per layer:
    # 8192 tokens * 2 * 1024 * 2 B = 33,554,432 B * 2 (t-1)/t / 1e11 B/s = 335.54432 us
    m2 = {op.name: op for op in toy(2).breakdown(8192, 0, 0)}
    assert m2["gemm"].time_s == pytest.approx(gemm.time_s / 2, rel=1e-12)
    assert m2["allreduce"].time_s == pytest.approx(335.54432e-6, rel=1e-12)


def test_prefill_pairs_count_the_cached_context():
    # a chunk of 100 tokens after 900 computed attends to 100 * 900 + 100 * 101 / 2 = 95,050 pairs:
    # 95,050 * 4096 FLOP = 389,324,800 / 1e14 = 3.893248 us, compute-bound; a fresh 100-token prompt's attention
    # is memory-bound: 2 * 100 * 4096 B (KV written) / 1e12 = 0.8192 us (5,050 pairs: 0.21 us)
    m = toy()
    fresh = m.pass_time_s(100, 0, 0)
    later = m.pass_time_s(100, 0, 0, 95_050)
    assert later - fresh == pytest.approx(3.893248e-6 - 0.8192e-6, rel=1e-9)


def test_llama_8b_decode_is_memory_bound_near_weights_over_bandwidth():
    m = RooflineModel(RooflineLatency(model="Llama-3.1-8B", gpu="H100"))
    gemm = {op.name: op for op in m.breakdown(0, 1, 1000)}["gemm"]
    assert gemm.bound == "memory"
    weights_s = 2 * (load_model("Llama-3.1-8B").params()["total"] - 2 * 128256 * 4096) / 3350e9
    assert gemm.memory_s == pytest.approx(weights_s / m.cal.gemm_memory_eff, rel=1e-9)
    prefill = {op.name: op for op in m.breakdown(8192, 0, 0)}
    assert prefill["gemm"].bound == prefill["attention_prefill"].bound == "compute"


@pytest.mark.parametrize("name,total,active", [
    ("Llama-3.1-8B", 8.03e9, 8.03e9), ("Llama-3.1-70B", 70.6e9, 70.6e9), ("Qwen3-32B", 32.8e9, 32.8e9),
    ("Qwen3-235B-A22B", 235e9, 22e9), ("gpt-oss-120b", 116.8e9, 5.7e9), ("DeepSeek-V3", 671e9, 37.5e9)])
def test_shipped_configs_parse_to_their_known_size(name, total, active):
    p = load_model(name).params()
    assert p["total"] == pytest.approx(total, rel=0.01)
    assert p["active"] == pytest.approx(active, rel=0.03)


def test_kv_bytes_per_token():
    assert load_model("Llama-3.1-8B").kv_bytes_per_token() == 131_072  # 2 * 8 * 128 * 32 * 2
    assert load_model("DeepSeek-V3").kv_bytes_per_token("fp8") == (512 + 64) * 61  # MLA latent
    assert len(model_names()) == 6


def test_kv_capacity_llama_8b_h100_tp1_by_hand():
    # weights: 8,029,995,008 params (HF's 8,030,261,248 less its 266,240 norm weights) * 2 B
    # (85,899,345,920 B * 0.9 - 16,059,990,016 - 3.5 GiB) / (64 * 131,072 B)
    # = (77,309,411,328 - 16,059,990,016 - 3,758,096,384) / 8,388,608 = 6853.5 -> 6853 blocks
    assert load_model("Llama-3.1-8B").params()["total"] == 8_029_995_008
    s = scenario_from_dict({"pools": {"prefill": {}, "decode": {"num_gpu_blocks": 100}},
                            "latency": {"kind": "roofline", "model": "Llama-3.1-8B", "gpu": "H100", "tp": 1}})
    assert s.pools.prefill.num_gpu_blocks == 6853
    assert s.pools.decode.num_gpu_blocks == 100  # explicit wins
    assert s.link.kv_bytes_per_token == 131_072


def test_weights_that_do_not_fit_and_unknown_names_are_one_line_errors():
    with pytest.raises(ConfigError) as e:
        scenario_from_dict({"pools": {"aggregated": {}},
                            "latency": {"kind": "roofline", "model": "Llama-3.1-70B", "gpu": "H100"}}, "x.yaml")
    assert e.value.messages == [e.value.messages[0]] and "does not fit on H100 at TP 1" in e.value.messages[0]
    with pytest.raises(ConfigError) as e:
        scenario_from_dict({"pools": {"aggregated": {}},
                            "latency": {"kind": "roofline", "model": "Llama-3.1-8B", "gpu": "V100"}}, "x.yaml")
    assert e.value.messages == ["x.yaml: unknown gpu 'V100' (expected one of: A100, H100, H200, B200, GB200, "
                                "B300, GB300, L40S) @ $.latency.gpu"]
    with pytest.raises(HardwareError):
        load_gpu("nope")


def test_a_config_json_path_is_accepted(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4, "vocab_size": 100}')
    arch = load_model(str(path))
    assert (arch.num_kv_heads, arch.head_dim, arch.intermediate_size) == (4, 64, 1024)
    assert arch.kv_bytes_per_token() == 2 * 4 * 64 * 2 * 2


def test_roofline_run_is_deterministic_and_fast_forward_equal():
    s = scenario_from_dict({"pools": {"aggregated": {"workers": 1, "max_num_batched_tokens": 512}},
                            "latency": {"kind": "roofline", "model": "Qwen3-32B", "gpu": "H200"}})
    reqs = [Request(rid=i, arrived_at=0.05 * i, input_length=700 + 50 * i, output_length=40) for i in range(6)]
    a = simulate(s, reqs)
    b = simulate(s, reqs, fast_forward=False)
    assert [r.finished_at for r in a.requests] == [r.finished_at for r in b.requests]
    assert all(r.status == "completed" for r in a.requests)


def test_step_cli(capsys):
    assert main(["step", "--model", "Llama-3.1-8B", "--gpu", "H100", "--prefill-tokens", "8192",
                 "--decode-contexts", "1000,2000"]) == 0
    out = capsys.readouterr().out
    assert "attention_prefill" in out and "attention_decode" in out and "compute-bound pass" in out
    assert main(["step", "--model", "nope", "--gpu", "H100", "--decode-contexts", "5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown model 'nope'" in err[0] and "Llama-3.1-8B" in err[0]
    assert main(["step", "--model", "Llama-3.1-8B", "--gpu", "X1", "--decode-contexts", "5"]) == 2
    assert "expected one of: A100" in capsys.readouterr().err
    # it says whose host overheads the pass took, and when --async-scheduling changes nothing
    # (an engine with no fit of its own for it), that it does not
    base = ["step", "--model", "Llama-3.1-8B", "--gpu", "H100", "--decode-contexts", "1000,2000"]
    assert main(base) == 0 and "host overheads: the H100 fit over all engines" in capsys.readouterr().out
    assert main(base + ["--backend", "vllm", "--async-scheduling"]) == 0
    assert "the H100 vllm fit for async scheduling" in capsys.readouterr().out
    assert main(base + ["--backend", "sglang", "--async-scheduling"]) == 0
    assert "no fit of its own for this GPU and engine, so the same" in capsys.readouterr().out
    # a precision the GPU's tensor cores lack is said, with the rate it is computed at
    assert main(base + ["--precision", "fp4"]) == 0
    out = capsys.readouterr().out
    assert "the H100 has no fp4 tensor cores" in out and "fp8 rate, 1978 TFLOPS" in out
    assert main(base + ["--precision", "fp8"]) == 0 and "tensor cores" not in capsys.readouterr().out


TABLE = """prefill_tokens,decode_requests,decode_context_tokens,pass_ms
100,0,0,10
300,0,0,30
0,1,100,2
0,1,300,4
0,3,300,5
0,3,900,9
"""


def test_table_model_interpolates_by_hand(tmp_path):
    (tmp_path / "t.csv").write_text(TABLE)
    s = scenario_from_dict({"pools": {"aggregated": {}}, "latency": {"kind": "table", "path": str(tmp_path / "t.csv")}})
    from simkit.engine.latency import make_latency_model

    m = make_latency_model(s.latency, 1000)
    # P(200) = 10 + (30 - 10) * (200 - 100) / 200 = 20 ms; P(400) extends the last segment: 40 ms
    assert m.pass_time_s(200, 0, 0) == pytest.approx(0.020, rel=1e-12)
    assert m.pass_time_s(400, 0, 0) == pytest.approx(0.040, rel=1e-12)
    # D(2 requests, 400 tokens: 200 per request): at r=1, c=200 -> 3; at r=3 -> 7; r=2 -> 5 ms
    assert m.pass_time_s(0, 2, 400) == pytest.approx(0.005, rel=1e-12)
    # a mixed pass costs both: 20 + 5 ms
    assert m.pass_time_s(200, 2, 400) == pytest.approx(0.025, rel=1e-12)
    dts, ends = m.decode_run(2, 400, 3, 1.0)
    assert dts == [m.pass_time_s(0, 2, 400 + 2 * i) for i in range(3)]


def test_table_errors_name_the_file_and_line(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text(TABLE.replace("0,3,900,9", "0,3,900,-1"))
    with pytest.raises(ConfigError) as e:
        scenario_from_dict({"pools": {"aggregated": {}}, "latency": {"kind": "table", "path": str(bad)}}, "s.yaml")
    assert e.value.messages == [f"s.yaml: {bad}:7: expected three integers >= 0 and a time > 0 in ms, "
                                "got '0,3,900,-1' @ $.latency.path"]
    bad.write_text(TABLE.replace("0,3,900,9\n", ""))
    with pytest.raises(ConfigError, match="full grid"):
        scenario_from_dict({"pools": {"aggregated": {}}, "latency": {"kind": "table", "path": str(bad)}})


def test_sequence_overhead_by_hand():
    # 5 us per request that samples a token: a pass prefilling one prompt beside 3 decode
    # requests samples 4 tokens -> 20 us more than without; a decode-only pass of 3 -> 15 us
    seq = RooflineModel(RooflineLatency(), arch=TOY, gpu=GPU,
                        calibration=attrs.evolve(IDEAL, sequence_overhead_us=5.0))
    m = toy()
    assert seq.pass_time_s(100, 3, 3000) - m.pass_time_s(100, 3, 3000) == pytest.approx(20e-6, rel=1e-9)
    assert seq.pass_time_s(0, 3, 3000) - m.pass_time_s(0, 3, 3000) == pytest.approx(15e-6, rel=1e-9)
    # plus 2 us per layer and sampled request, 3 layers: 4 requests * (5 + 3 * 2) = 44 us
    deep = attrs.evolve(TOY, num_layers=3)
    per_layer = RooflineModel(RooflineLatency(), arch=deep, gpu=GPU,
                              calibration=attrs.evolve(IDEAL, sequence_overhead_us=5.0, request_layer_overhead_us=2.0))
    bare = RooflineModel(RooflineLatency(), arch=deep, gpu=GPU, calibration=IDEAL)
    assert per_layer.pass_time_s(100, 3, 3000) - bare.pass_time_s(100, 3, 3000) == pytest.approx(44e-6, rel=1e-9)


def test_overrides_and_backend_overheads():
    base = RooflineModel(RooflineLatency(model="Llama-3.1-8B", gpu="H100", tensor_parallel_size=2))
    # overriding the four overheads to 0 removes exactly the fitted fixed time of a pass of 4
    # decode requests at TP 2: 32 layers * layer_overhead_us + pass_overhead_ms
    # + 4 sampled requests * (sequence_overhead_us + 32 layers * request_layer_overhead_us)
    # + 2 all-reduces * 32 layers * allreduce_latency_us
    bare = RooflineModel(RooflineLatency(model="Llama-3.1-8B", gpu="H100", tensor_parallel_size=2,
                                         layer_overhead_us=0.0, pass_overhead_ms=0.0,
                                         sequence_overhead_us=0.0, allreduce_latency_us=0.0,
                                         request_layer_overhead_us=0.0))
    c = base.cal
    fixed = (32 * c.layer_overhead_us + 4 * (c.sequence_overhead_us + 32 * c.request_layer_overhead_us)
             + 64 * c.allreduce_latency_us) * 1e-6 + c.pass_overhead_ms * 1e-3
    assert base.pass_time_s(0, 4, 4000) - bare.pass_time_s(0, 4, 4000) == pytest.approx(fixed, rel=1e-9)
    from simkit.engine.hardware import load_calibration

    for backend in ("vllm", "sglang", "trtllm"):
        m = RooflineModel(RooflineLatency(model="Llama-3.1-8B", gpu="H100", backend=backend))
        assert m.cal == load_calibration("H100", backend, precision="bf16")
        # the engine's own GEMM kernels' fit where it has one (aiconfigurator-core's tables),
        # the GPU's communication fit
        import json
        from importlib import resources

        table = json.loads((resources.files("simkit.engine") / "data" / "calibration.json").read_text())["H100"]
        gemm = table["backends"][backend].get("gemm", table["gemm"])["bf16"]
        assert (m.cal.gemm_compute_eff, m.cal.gemm_memory_eff) == (gemm["gemm_compute_eff"], gemm["gemm_memory_eff"])
        assert m.cal.comm_eff == base.cal.comm_eff == table["comm_eff"]


def test_async_scheduling_takes_the_overheads_fitted_for_it(monkeypatch):
    # a table with an engine fit and an async one beside it (calibrate_roofline writes
    # <backend>/async where the async rows are some of the engine's only)
    from simkit.engine import hardware

    table = {"H100": {"gemm_compute_eff": 0.7, "gemm_memory_eff": 0.8, "pass_overhead_ms": 9.0,
                      "sequence_overhead_us": 9.0,
                      "backends": {"vllm": {"pass_overhead_ms": 4.0, "sequence_overhead_us": 70.0},
                                   "vllm/async": {"pass_overhead_ms": 2.0, "sequence_overhead_us": 0.0},
                                   "vllm/moe": {"pass_overhead_ms": 6.0}}}}
    monkeypatch.setattr(hardware, "_calibration_table", lambda: table)
    plain = hardware.load_calibration("H100", "vllm")
    overlap = hardware.load_calibration("H100", "vllm", async_scheduling=True)
    assert (plain.pass_overhead_ms, plain.sequence_overhead_us) == (4.0, 70.0)
    assert (overlap.pass_overhead_ms, overlap.sequence_overhead_us) == (2.0, 0.0)
    # an engine without an async fit keeps its own; a MoE model its MoE fit; no engine, the GPU's
    assert hardware.load_calibration("H100", "sglang", async_scheduling=True).pass_overhead_ms == 9.0
    assert hardware.load_calibration("H100", "vllm", moe=True, async_scheduling=True).pass_overhead_ms == 6.0
    assert hardware.load_calibration("H100", None, async_scheduling=True).pass_overhead_ms == 9.0
    # a pool's async_scheduling reaches its latency model: one decode pass of 4 requests is
    # 2 ms + 4 x 0 us of host time with it, 4 ms + 4 x 70 us without (the rest the same)
    from simkit.engine.latency import make_latency_model

    spec = RooflineLatency(model="Llama-3.1-8B", gpu="H100", backend="vllm")
    on = make_latency_model(spec, 10000, async_scheduling=True).pass_time_s(0, 4, 4000)
    off = make_latency_model(spec, 10000).pass_time_s(0, 4, 4000)
    assert off - on == pytest.approx((4.0 - 2.0) * 1e-3 + 4 * 70.0e-6, rel=1e-9)
    # and a scenario's pool hands its async_scheduling to its workers' latency model
    from simkit import scenario_from_dict
    from simkit.sim import Simulation

    for flag, pass_ms in ((True, 2.0), (False, 4.0)):
        sc = scenario_from_dict({"latency": {"kind": "roofline", "model": "Llama-3.1-8B", "gpu": "H100",
                                             "backend": "vllm"},
                                 "pools": {"aggregated": {"workers": 1, "async_scheduling": flag}},
                                 "workload": {"kind": "synthetic", "num_requests": 1}}, source="t")
        worker = Simulation(sc, []).pools["aggregated"][0]
        assert worker.latency.cal.pass_overhead_ms == pass_ms


def test_aic_bucket_grid_by_hand():
    from simkit.engine.latency.aic import bucket

    # 16 points per doubling: up to 16 exact; [512, 1024) in steps of 32; rounded up
    assert [bucket(x, 16) for x in (1, 16, 17, 33, 763, 768, 769, 1000, 2048, 2049)] == \
        [1, 16, 17, 34, 768, 768, 800, 1024, 2048, 2176]
    assert all(x <= bucket(x, 64) < x * (1 + 1 / 64) + 1 for x in range(1, 5000))


def test_aic_latency_model_caches_by_bucket():
    pytest.importorskip("aiconfigurator_core", reason="optional extra simkit[aic] (aiconfigurator-core) not installed")
    from simkit.engine.latency import make_latency_model

    latency = {"kind": "aic", "model": "Llama-3.1-8B", "gpu": "H100", "precision": "fp8", "backend": "vllm",
               "bucket_steps_per_octave": 16}
    s = scenario_from_dict({"pools": {"aggregated": {}},
                            "latency": dict(latency, pass_overhead_ms=0.0, sequence_overhead_us=0.0)})
    m = make_latency_model(s.latency, 1)
    a = m.pass_time_s(0, 8, 8 * 1000)  # 1000 tokens per request -> bucket 1024
    assert m.calls == 1
    assert m.pass_time_s(0, 8, 8 * 1010) == a and m.calls == 1  # same bucket: no new call
    assert a == pytest.approx(m.exact_ms(0, 8, 1024) * 1e-3, rel=1e-12)
    assert m.pass_time_s(8192, 0, 0) > a > 0
    assert s.pools.aggregated.num_gpu_blocks > 0 and s.link is None
    # the host time beside the kernels: the fitted terms (null) or the spec's, per pass and per
    # sampled request: 8 decodes, 2 ms + 8 x 50 us = 2.4 ms more than the kernels
    from simkit.engine.hardware import load_calibration

    fitted = make_latency_model(scenario_from_dict({"pools": {"aggregated": {}}, "latency": latency}).latency, 1)
    cal = load_calibration("H100", "vllm")
    assert fitted.pass_time_s(0, 8, 8 * 1000) == pytest.approx(
        a + (cal.aic_pass_overhead_ms + 8 * cal.aic_sequence_overhead_us * 1e-3) * 1e-3, rel=1e-12)
    mine = make_latency_model(scenario_from_dict({"pools": {"aggregated": {}}, "latency": dict(
        latency, pass_overhead_ms=2.0, sequence_overhead_us=50.0)}).latency, 1)
    assert mine.pass_time_s(0, 8, 8 * 1000) == pytest.approx(a + 2.4e-3, rel=1e-12)
    # a prompt's pass samples one token too: 2 ms + 1 x 50 us
    assert mine.pass_time_s(8192, 0, 0) == pytest.approx(m.pass_time_s(8192, 0, 0) + 2.05e-3, rel=1e-12)


def test_aic_needs_a_shipped_model():
    pytest.importorskip("aiconfigurator_core", reason="optional extra simkit[aic] (aiconfigurator-core) not installed")
    with pytest.raises(ConfigError, match="needs a shipped model name"):
        scenario_from_dict({"pools": {"aggregated": {}}, "latency": {"kind": "aic", "model": "/x/config.json"}})


def test_roofline_scenario_dumps_kind_first_and_round_trips():
    import yaml

    from simkit.spec import dump_scenario

    s = scenario_from_dict({"pools": {"prefill": {"latency": {"kind": "roofline", "model": "Qwen3-32B", "gpu": "H200",
                                                              "tp": 1}}, "decode": {}},
                            "latency": {"kind": "roofline", "model": "Qwen3-32B", "gpu": "H200", "tp": 2,
                                        "precision": "fp8"}})
    data = yaml.safe_load(dump_scenario(s))
    assert list(data["latency"])[0] == "kind" and list(data["pools"]["prefill"]["latency"])[0] == "kind"
    assert scenario_from_dict(data) == s
    # prefill at TP 1 bf16 holds fewer blocks than decode at TP 2 fp8 (weights 65.5 GB vs 16.4 GB per GPU)
    assert s.pools.prefill.num_gpu_blocks < s.pools.decode.num_gpu_blocks


def test_moe_models_take_their_engines_moe_fit_dense_models_do_not():
    import json
    from importlib import resources

    from simkit.engine.hardware import load_calibration

    table = json.loads((resources.files("simkit.engine") / "data" / "calibration.json").read_text())
    fits = table["H200"]["backends"]
    moe_fit, dense_fit = fits["sglang/moe"], fits["sglang"]
    assert moe_fit["pass_overhead_ms"] != dense_fit["pass_overhead_ms"]  # else this test proves nothing
    moe = RooflineModel(RooflineLatency(model="DeepSeek-V3", gpu="H200", precision="fp8", tensor_parallel_size=8,
                                        backend="sglang"))
    dense = RooflineModel(RooflineLatency(model="Llama-3.1-8B", gpu="H200", backend="sglang"))
    for name in ("layer_overhead_us", "pass_overhead_ms", "sequence_overhead_us", "allreduce_latency_us",
                 "request_layer_overhead_us"):
        assert getattr(moe.cal, name) == moe_fit[name]
        assert getattr(dense.cal, name) == dense_fit[name]
    assert moe.cal == load_calibration("H200", "sglang", moe=True, precision="fp8")
    # an engine without a MoE fit on that GPU (H100 vllm: too few MoE calibration rows): MoE
    # models take the engine's fit
    assert "vllm/moe" not in table["H100"]["backends"]
    assert load_calibration("H100", "vllm", moe=True) == load_calibration("H100", "vllm")


def test_quantized_weights_quantize_their_gemm_inputs_and_the_lm_head_stays_bf16():
    # fp8 weights: every projection's input is read in bf16 and written in fp8 first. The toy
    # layer's inputs per token: QKV and O projections 1024 + 8 * 128 = 2048 values, the MLP's
    # gate/up and down 1024 + 4096 = 5120; 7168 values * (2 + 1) bytes at 1000 GB/s * 0.5
    # -> 43.008 ns per token, 4.3008 us for 100 tokens
    gpu = attrs.evolve(GPU, dense_tflops={"bf16": 100.0, "fp8": 200.0})
    cal = attrs.evolve(IDEAL, quant_memory_eff=0.5)
    fp8 = RooflineModel(RooflineLatency(precision="fp8"), arch=TOY, gpu=gpu, calibration=cal)
    ops = {op.name: op for op in fp8.breakdown(100, 0, 0)}
    assert ops["quantize"].time_s == pytest.approx(100 * 7168 * 3 / 5e11, rel=1e-12)
    bf16 = {op.name: op for op in RooflineModel(RooflineLatency(), arch=TOY, gpu=gpu, calibration=cal)
            .breakdown(100, 0, 0)}
    assert "quantize" not in bf16
    # the LM head (1024 x 1000) is priced at bf16 either way: 2 * 1 sampled * 1,024,000 flops
    # at 100 TFLOP/s against its 2,048,000 bf16 bytes at 1000 GB/s -> memory bound, 2.048 us
    assert ops["lm_head"].time_s == bf16["lm_head"].time_s == pytest.approx(2.048e-6, rel=1e-9)


def test_a_precision_takes_its_gemm_fit_and_an_engine_its_own_kernels_fit():
    import json
    from importlib import resources

    from simkit.engine.hardware import load_calibration

    table = json.loads((resources.files("simkit.engine") / "data" / "calibration.json").read_text())["B200"]
    fp8 = load_calibration("B200", precision="fp8")
    assert fp8.gemm_compute_eff == table["gemm"]["fp8"]["gemm_compute_eff"]
    assert load_calibration("B200").gemm_compute_eff == table["gemm_compute_eff"]  # no precision: bf16
    trt = load_calibration("B200", "trtllm", precision="fp8")
    own = table["backends"]["trtllm"]["gemm"]["fp8"]
    assert (trt.gemm_compute_eff, trt.gemm_memory_eff, trt.quant_memory_eff) == (
        own["gemm_compute_eff"], own["gemm_memory_eff"], own["quant_memory_eff"])
    assert trt.pass_overhead_ms == table["backends"]["trtllm"]["pass_overhead_ms"]
