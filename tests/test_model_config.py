"""A model ``config.json``, field by field: what the parser reads (the MoE layer rule, by hand)
and what it refuses (one line naming the file and the field, exit 2; never a pass time priced
from a field that makes no sense)."""

from __future__ import annotations

import json

import pytest

from conftest import REPO, one_line
from simkit import scenario_from_dict
from simkit.cli import main
from simkit.engine.hardware import HardwareError, arch_from_config, load_model, moe_layer_count
from simkit.engine.latency import RooflineModel
from simkit.spec import ConfigError, RooflineLatency

QWEN_MOE = json.loads((REPO / "simkit" / "engine" / "data" / "models" / "Qwen3-235B-A22B.json").read_text())

# a toy MoE: 8 layers, hidden 64, 4 heads of 16 (hidden / heads), 2 KV heads, dense MLP 256,
# 4 experts of width 32, 2 per token, vocabulary 100
TOY_MOE = {"num_hidden_layers": 8, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
           "intermediate_size": 256, "vocab_size": 100, "num_experts": 4, "num_experts_per_tok": 2,
           "moe_intermediate_size": 32}


@pytest.mark.parametrize("args, moe", [
    ((94,), 94),                    # Qwen3-235B-A22B: every layer
    ((94, 0, 2), 47),               # (i + 1) % 2 == 0: the odd layers 1, 3, ..., 93
    ((94, 0, 2, 1, (0,)), 47),      # layer 0 is even: dense already, mlp_only_layers changes nothing
    ((94, 0, 2, 1, (1,)), 46),      # layer 1 was MoE: one fewer
    ((8, 0, 2, 1, (0, 3)), 3),      # odd layers 1, 3, 5, 7 less 3: 1, 5, 7
    ((61, 3), 58),                  # DeepSeek-V3: first_k_dense_replace 3
    ((10, 3, 1, 2), 3),             # i >= 3 and i % 2 == 0: 4, 6, 8
    ((10, 3, 2, 1), 4),             # i >= 3 and (i + 1) % 2 == 0: 3, 5, 7, 9
    ((10, 0, 1000), 0),             # a step beyond the layers: none
    ((1 << 40, 0, 2), 1 << 39),     # counted, not looped over
])
def test_moe_layer_count_by_hand(args, moe):
    assert moe_layer_count(*args) == moe


def test_a_toy_moe_with_sparse_step_and_mlp_only_layers_by_hand():
    # decoder_sparse_step 2 and mlp_only_layers [0, 3]: MoE layers 1, 5, 7 (3), dense 0, 2, 3, 4, 6 (5)
    # per layer: attention 64 * (4 + 2 * 2) * 16 + 4 * 16 * 64 = 8,192 + 4,096 = 12,288
    # dense MLP 3 * 64 * 256 = 49,152; one expert 3 * 64 * 32 = 6,144; router 64 * 4 = 256
    arch = arch_from_config(dict(TOY_MOE, decoder_sparse_step=2, mlp_only_layers=[0, 3]), "toy")
    assert (arch.num_moe_layers, arch.num_dense_layers) == (3, 5)
    p = arch.params()
    assert p["attention"] == 8 * 12_288 == 98_304
    assert p["dense_mlp"] == 5 * 49_152 == 245_760
    assert p["experts"] == 3 * 4 * 6_144 == 73_728
    assert p["router"] == 3 * 256 == 768
    assert p["embedding"] == 2 * 100 * 64 == 12_800
    assert p["total"] == 98_304 + 245_760 + 73_728 + 768 + 12_800 == 431_360
    assert p["active"] == 431_360 - 73_728 + 3 * 2 * 6_144 == 394_496
    # the roofline prices the routed experts of those 3 layers: one decode token, 2 experts,
    # 2 * 2 * 6,144 * 3 = 73,728 FLOPs
    model = RooflineModel(RooflineLatency(model="Llama-3.1-8B", gpu="H100"), arch=arch)
    experts = {op.name: op for op in model.breakdown(0, 1, 100)}["experts"]
    assert experts.flops == 2 * 2 * 6_144 * 3 == 73_728


def test_the_shipped_moe_configs_keep_their_layer_counts():
    assert load_model("Qwen3-235B-A22B").num_moe_layers == 94
    assert load_model("DeepSeek-V3").num_moe_layers == 61 - 3
    assert load_model("gpt-oss-120b").num_moe_layers == 36
    assert load_model("Llama-3.1-8B").num_moe_layers == 0


def test_a_qwen_moe_config_with_sparse_step_2_and_mlp_only_layer_0(tmp_path):
    path = tmp_path / "qwen.json"
    path.write_text(json.dumps(dict(QWEN_MOE, decoder_sparse_step=2, mlp_only_layers=[0])))
    arch = load_model(str(path))
    assert (arch.num_moe_layers, arch.num_dense_layers) == (47, 47)  # odd layers of 94


def _step(tmp_path, capsys, **change) -> tuple[int, str]:
    """``simkit step`` (the hostile tester's command) on Qwen3-235B-A22B's config with ``change``."""
    path = tmp_path / "X.json"
    path.write_text(json.dumps(dict(QWEN_MOE, **change)))
    code = main(["step", "--model", str(path), "--gpu", "B200", "--tp", "8", "--precision", "fp8",
                 "--prefill-tokens", "512", "--decode-contexts", "100,200"])
    return code, one_line(capsys) if code else capsys.readouterr().out


@pytest.mark.parametrize("change, message", [
    ({"num_experts_per_tok": 0}, "config.json gives 128 experts but 0 experts per token (num_experts_per_tok); "
                                 "a MoE model routes each token to 1 to 128 experts"),
    ({"num_experts_per_tok": None}, "config.json gives 128 experts but 0 experts per token (num_experts_per_tok)"),
    ({"num_experts_per_tok": 8.0}, "config.json field num_experts_per_tok must be an integer from 0 to "
                                   "1099511627776, got 8.0"),
    ({"num_key_value_heads": 128}, "config.json field num_key_value_heads is 128, which does not divide the 64 "
                                   "attention heads (num_attention_heads); expected a divisor of 64"),
    ({"num_key_value_heads": 3}, "config.json field num_key_value_heads is 3, which does not divide the 64"),
    ({"num_key_value_heads": 0}, "config.json field num_key_value_heads must be an integer from 1 to"),
    ({"mlp_only_layers": [1000, -1]}, "config.json field mlp_only_layers names layer 1000; expected layer indices "
                                      "from 0 to 93 (num_hidden_layers 94)"),
    ({"mlp_only_layers": [-1]}, "config.json field mlp_only_layers names layer -1; expected layer indices"),
    ({"mlp_only_layers": [0] * 500}, "config.json field mlp_only_layers names layer 0 more than once; expected "
                                     "distinct layer indices"),
    ({"mlp_only_layers": [1.0]}, "config.json field mlp_only_layers must be a list of layer indices (integers), "
                                 "got [1.0]"),
    ({"mlp_only_layers": 3}, "config.json field mlp_only_layers must be a list of layer indices"),
    ({"decoder_sparse_step": 0}, "config.json field decoder_sparse_step must be an integer from 1 to"),
    ({"decoder_sparse_step": True}, "config.json field decoder_sparse_step must be an integer from 1 to "
                                    "1099511627776, got True"),
    ({"decoder_sparse_step": 2, "moe_layer_freq": 2}, "config.json gives both decoder_sparse_step 2 (Qwen's MoE "
                                                      "layer spacing) and moe_layer_freq 2 (DeepSeek's)"),
    ({"max_position_embeddings": 0}, "config.json field max_position_embeddings must be an integer from 1 to "
                                     "2147483648, got 0"),
    ({"max_position_embeddings": 1 << 40}, "config.json field max_position_embeddings must be an integer from 1 to "
                                           "2147483648, got 1099511627776"),
    ({"first_k_dense_replace": 200}, "config.json field first_k_dense_replace is 200, more than the 94 layers "
                                     "(num_hidden_layers); expected 0 to 94"),
    ({"moe_intermediate_size": 0}, "config.json gives 128 experts but moe_intermediate_size 0; expected each "
                                   "expert's MLP width, an integer >= 1"),
    ({"n_shared_experts": -1}, "config.json field n_shared_experts must be an integer from 0 to"),
    ({"tie_word_embeddings": "false"}, "config.json field tie_word_embeddings must be true or false, got 'false'"),
    ({"layer_types": ["full_attention"] * 3}, "config.json field layer_types names 3 layers; expected one type "
                                              "per layer, 94 (num_hidden_layers)"),
    ({"layer_types": [1] * 94}, "config.json field layer_types must be a list of strings"),
    ({"layer_types": ["sliding_attention"] * 94}, "config.json has 94 sliding_attention layers (layer_types) but "
                                                  "sliding_window is None; expected the window in tokens, >= 1"),
    ({"head_dim": None, "num_attention_heads": 48, "num_key_value_heads": 4},
     "config.json has no head_dim and its 48 attention heads (num_attention_heads) do not divide hidden_size 4096"),
])
def test_a_config_field_out_of_range_is_one_line_naming_the_file_and_field(tmp_path, capsys, change, message):
    code, line = _step(tmp_path, capsys, **change)
    assert code == 2
    assert line.startswith(f"simkit step: {tmp_path / 'X.json'}: {message}"), line


def test_an_mla_config_needs_its_head_dims(tmp_path, capsys):
    deepseek = json.loads((REPO / "simkit" / "engine" / "data" / "models" / "DeepSeek-V3.json").read_text())
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(dict(deepseek, v_head_dim=0)))
    with pytest.raises(HardwareError) as info:
        load_model(str(path))
    assert str(info.value) == (f"{path}: config.json has kv_lora_rank 512 (MLA attention) but field v_head_dim is 0; "
                               "expected an integer >= 1")


def test_a_sparse_step_beyond_the_layers_prices_every_layer_dense(tmp_path, capsys):
    # Hugging Face's rule: no layer i < 94 has (i + 1) % 1000 == 0, so every MLP is dense, and the
    # pass is the one of a config with no experts at all
    code, sparse = _step(tmp_path, capsys, decoder_sparse_step=1000)
    assert code == 0
    dense = {k: v for k, v in QWEN_MOE.items() if k not in ("num_experts", "num_experts_per_tok")}
    code, same = _step(tmp_path, capsys, **{k: dense.get(k) for k in QWEN_MOE})
    assert code == 0 and sparse == same


def test_a_scenario_names_the_config_and_the_field(tmp_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps(dict(QWEN_MOE, max_position_embeddings=0)))
    with pytest.raises(ConfigError) as info:
        scenario_from_dict({"pools": {"aggregated": {}},
                            "latency": {"kind": "roofline", "model": str(path), "gpu": "B200", "tp": 8}}, "s.yaml")
    assert info.value.messages == [f"s.yaml: {path}: config.json field max_position_embeddings must be an integer "
                                   "from 1 to 2147483648, got 0 @ $.latency.model"]


def test_a_config_without_max_position_embeddings_leaves_max_model_len_unset(tmp_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps({k: v for k, v in QWEN_MOE.items() if k != "max_position_embeddings"}))
    s = scenario_from_dict({"pools": {"aggregated": {}},
                            "latency": {"kind": "roofline", "model": str(path), "gpu": "B200", "tp": 8}})
    assert s.pools.aggregated.max_model_len is None
