"""Model architectures (from Hugging Face ``config.json``) and GPU specs, from package data.

``load_model(name_or_path)`` reads a shipped config (``Llama-3.1-8B``, ``Llama-3.1-70B``,
``Qwen3-32B``, ``Qwen3-235B-A22B``, ``gpt-oss-120b``, ``DeepSeek-V3``; see
``simkit/engine/data/NOTICE.md`` for their source) or any ``config.json`` path, into a frozen
:class:`ModelArch`. ``load_gpu(name)`` returns a :class:`GpuSpec` (A100, H100, H200, B200,
GB200, B300, GB300, L40S) with dense tensor-core TFLOPS per precision, HBM bandwidth and capacity and
interconnect figures from aiconfigurator-core's ``systems/*.yaml`` (Apache-2.0).
``load_calibration(gpu)`` returns the fitted efficiencies and overheads of
``simkit/engine/data/calibration.json`` (``benchmarks/calibrate_roofline.py``). A measured
per-pass table (the ``table`` latency model) is read by :mod:`simkit.engine.pass_table`.

Parameter and KV sizes follow the architectures' definitions: grouped-query attention
(Llama, Qwen), gated (SwiGLU) MLPs of three ``hidden x intermediate`` matrices, mixture of
experts (routed experts, experts per token, shared experts, leading dense layers: DeepSeek-V3's
``first_k_dense_replace``), multi-head latent attention (MLA, DeepSeek-V2/V3: the KV cache
holds ``kv_lora_rank + qk_rope_head_dim`` values per token and layer) and sliding-window
layers (gpt-oss ``layer_types``).

Part of :mod:`simkit.engine`: reads only package data and the config.json a scenario names (json; no simulation).
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from importlib import resources
from typing import Optional
from attrs import frozen

from simkit.core.files import NotUtf8, read_text

__all__ = ["ModelArch", "GpuSpec", "Calibration", "PRECISION_BYTES", "HardwareError",
           "load_model", "load_gpu", "load_calibration", "model_names", "gpu_names",
           "weights_bytes", "arch_from_config", "moe_layer_count", "kv_shard_fraction", "kv_capacity_blocks",
           "AIC_MODEL_PATHS", "aic_model_path", "aic_system"]

#: bytes per weight or KV value. fp4 is NVFP4: 4 bits plus one fp8 scale per 16 values
#: (NVIDIA, "Introducing NVFP4", 2025): 0.5 + 1/16 bytes.
PRECISION_BYTES = {"bf16": 2.0, "fp8": 1.0, "fp4": 0.5625}


class HardwareError(ValueError):
    """An unknown model or GPU name, an unreadable or unsupported config.json."""


def _data_dir():
    return resources.files("simkit.engine") / "data"


@lru_cache(maxsize=None)
def _model_files() -> dict[str, str]:
    return {p.name[:-5].lower(): p.name[:-5] for p in (_data_dir() / "models").iterdir()
            if p.name.endswith(".json")}


def model_names() -> list[str]:
    """The shipped model names, sorted."""
    return sorted(_model_files().values())


@frozen
class ModelArch:
    """A decoder-only transformer's shape, as its config.json gives it.

    Counts are per model (all layers, all heads); :meth:`params` gives parameter counts.
    ``num_experts == 0`` (or every layer in ``num_dense_layers``) means dense;
    ``kv_lora_rank > 0`` means MLA attention.
    """

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int  #: dense MLP width (dense layers of a MoE model too)
    vocab_size: int
    tie_word_embeddings: bool = False
    num_experts: int = 0  #: routed experts per MoE layer
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    num_shared_experts: int = 0
    #: the longest sequence (prompt + output tokens) the model supports; 0: not given
    max_position_embeddings: int = 0
    #: layers with a dense MLP in a MoE model (:func:`moe_layer_count` gives the others)
    num_dense_layers: int = 0
    q_lora_rank: int = 0  #: MLA; 0 = full-rank query projection
    kv_lora_rank: int = 0  #: MLA latent KV width; 0 = not MLA
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    sliding_window: int = 0  #: tokens a sliding-window layer attends to (0 = none)
    num_sliding_layers: int = 0

    @property
    def is_moe(self) -> bool:
        """Whether some layer routes to experts (a config with experts may still give every
        layer a dense MLP: ``decoder_sparse_step`` beyond the layers, say)."""
        return self.num_experts > 0 and self.num_dense_layers < self.num_layers

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - self.num_dense_layers if self.is_moe else 0

    def attention_params(self) -> int:
        """Weights of one layer's attention projections (Q, K, V, O or MLA's low-rank set)."""
        h, nh = self.hidden_size, self.num_heads
        if self.is_mla:
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            q = (h * self.q_lora_rank + self.q_lora_rank * nh * qk) if self.q_lora_rank else h * nh * qk
            kv = h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank * nh * (
                self.qk_nope_head_dim + self.v_head_dim)
            return q + kv + nh * self.v_head_dim * h
        return h * (nh + 2 * self.num_kv_heads) * self.head_dim + nh * self.head_dim * h

    def dense_mlp_params(self) -> int:
        """Weights of one dense gated MLP: gate, up and down, 3 * hidden * intermediate."""
        return 3 * self.hidden_size * self.intermediate_size

    def expert_params(self) -> int:
        """Weights of one expert (gated MLP of ``moe_intermediate_size``)."""
        return 3 * self.hidden_size * self.moe_intermediate_size

    def params(self) -> dict[str, int]:
        """Parameter counts: ``attention``, ``dense_mlp``, ``experts`` (routed, all layers),
        ``shared_experts``, ``router``, ``embedding`` (input and output), ``total`` and
        ``active`` (per token: attention + dense + k routed + shared + router + embedding)."""
        L, moe = self.num_layers, self.num_moe_layers
        emb = self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2)
        out = {
            "attention": L * self.attention_params(),
            "dense_mlp": (L - moe) * self.dense_mlp_params(),
            "experts": moe * self.num_experts * self.expert_params(),
            "shared_experts": moe * self.num_shared_experts * self.expert_params(),
            "router": moe * self.hidden_size * self.num_experts,
            "embedding": emb,
        }
        out["total"] = sum(out.values())
        out["active"] = out["total"] - out["experts"] + moe * self.experts_per_token * self.expert_params()
        return out

    def kv_values_per_token_layer(self) -> int:
        """KV-cache values one token stores in one layer: 2 * KV heads * head dim (K and V),
        or ``kv_lora_rank + qk_rope_head_dim`` for MLA (one shared latent)."""
        if self.is_mla:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.num_kv_heads * self.head_dim

    def kv_bytes_per_token(self, kv_precision: str = "bf16") -> int:
        """KV-cache bytes one token occupies over all layers (whole model, before TP).
        Llama-3.1-8B bf16: 2 * 8 * 128 * 32 layers * 2 B = 131,072."""
        return int(self.kv_values_per_token_layer() * self.num_layers * PRECISION_BYTES[kv_precision])


def _get(cfg: dict, *keys: str, default=None):
    for key in keys:
        if cfg.get(key) is not None:
            return cfg[key]
    return default


#: the largest size or count a config.json field may give: beyond it the roofline's float
#: arithmetic overflows
MAX_CONFIG_INT = 1 << 40
#: the most tokens ``max_position_embeddings`` may give: a pool's ``max_model_len``, which it
#: defaults, is at most 2^31 tokens (``_tokens`` in :mod:`simkit.spec.base`)
MAX_POSITION_EMBEDDINGS = 1 << 31
#: config.json fields that are sizes: at least 1 when given
_SIZES = ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size", "num_key_value_heads",
          "head_dim", "intermediate_size", "max_position_embeddings", "decoder_sparse_step", "moe_layer_freq")
#: config.json fields that are counts: at least 0 when given (each is checked against the
#: others below where a value is meaningful only in a range: experts per token, dense layers...)
_COUNTS = ("num_experts", "n_routed_experts", "num_local_experts", "num_experts_per_tok", "experts_per_token",
           "moe_intermediate_size", "n_shared_experts", "first_k_dense_replace", "q_lora_rank", "kv_lora_rank",
           "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "sliding_window")


def _config_int(cfg: dict, key: str, least: int, most: int, where: str) -> None:
    """Refuse ``cfg[key]`` (when given, not null) unless it is an integer (not a bool, not a
    float) from ``least`` to ``most``."""
    value = cfg.get(key)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or not least <= value <= most):
        raise HardwareError(f"{where}: config.json field {key} must be an integer from {least} to {most}, "
                            f"got {repr(value)[:40]}")


def _layer_list(cfg: dict, key: str, layers: int, where: str) -> list:
    """``cfg[key]`` (null or absent: empty), a list of distinct layer indices in ``[0, layers)``."""
    value = cfg.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        raise HardwareError(f"{where}: config.json field {key} must be a list of layer indices (integers), "
                            f"got {repr(value)[:40]}")
    outside = [i for i in value if not 0 <= i < layers]
    if outside:
        raise HardwareError(f"{where}: config.json field {key} names layer {outside[0]}; expected layer "
                            f"indices from 0 to {layers - 1} (num_hidden_layers {layers})")
    seen: set = set()
    for i in value:
        if i in seen:
            raise HardwareError(f"{where}: config.json field {key} names layer {i} more than once; "
                                "expected distinct layer indices")
        seen.add(i)
    return value


def moe_layer_count(layers: int, first_dense: int = 0, sparse_step: int = 1, freq: int = 1,
                    mlp_only: tuple = ()) -> int:
    """How many of ``layers`` decoder layers have a mixture-of-experts MLP (the others, a dense
    one), by the rules of the architectures' modeling code, which a config.json combines:

    - Qwen2-MoE / Qwen3-MoE (Hugging Face transformers ``modeling_qwen3_moe.py``,
      ``Qwen3MoeDecoderLayer``): layer ``i`` is MoE iff ``i not in mlp_only_layers`` and
      ``num_experts > 0`` and ``(i + 1) % decoder_sparse_step == 0``;
    - DeepSeek-V2/V3 (``modeling_deepseek.py``, vLLM ``deepseek_v2.py``): iff
      ``i >= first_k_dense_replace`` and ``i % moe_layer_freq == 0``.

    Counted without a loop over the layers (a config may give up to 2^40 of them): the
    layers ``i`` in ``[first_dense, layers)`` that pass the step rules, less the
    ``mlp_only`` ones among them (distinct indices). At most one of ``sparse_step`` and
    ``freq`` may exceed 1 (no architecture has both; :func:`arch_from_config` refuses it).
    """
    if sparse_step > 1 and freq > 1:
        raise ValueError("decoder_sparse_step and moe_layer_freq cannot both exceed 1")
    if freq == 1:  # i + 1 in [first_dense + 1, layers] divisible by sparse_step
        count = layers // sparse_step - first_dense // sparse_step
    else:  # i in [first_dense, layers) divisible by freq
        count = -(-layers // freq) - -(-first_dense // freq)
    return count - sum(1 for i in mlp_only if i >= first_dense and (i + 1) % sparse_step == 0 and i % freq == 0)


def arch_from_config(cfg: dict, name: str, source: Optional[str] = None) -> ModelArch:
    """A :class:`ModelArch` from a parsed config.json, every field it reads checked.

    ``source``: the file as the user named it, for messages (default ``name``). Sizes
    (layers, hidden size, heads, KV heads, head dim, MLP width, vocabulary,
    ``max_position_embeddings``, ``decoder_sparse_step``, ``moe_layer_freq``) are integers
    from 1 to 2^40 (``max_position_embeddings`` to 2^31, a pool's longest ``max_model_len``)
    and counts (experts, MLA ranks, ``sliding_window``...) from 0; the KV heads
    divide the attention heads (grouped-query or multi-query attention); without
    ``head_dim`` the heads divide ``hidden_size`` (the head dim is their quotient); a MoE
    model (experts > 0) routes each token to 1 to ``num_experts`` experts of width
    ``moe_intermediate_size`` >= 1 and keeps ``first_k_dense_replace`` within the layers;
    ``mlp_only_layers`` are distinct layer indices; an MLA model (``kv_lora_rank`` > 0) gives
    its head dims (``qk_rope_head_dim``, ``qk_nope_head_dim``, ``v_head_dim``) >= 1;
    ``layer_types`` names every layer and, with sliding layers, ``sliding_window`` >= 1.

    Raises:
        HardwareError: a required field is missing, or a field is out of the ranges above
            (one line naming ``source`` and the field).
    """
    where = source or name
    if isinstance(cfg.get("text_config"), dict):  # multimodal wrappers keep the LM here
        cfg = {**cfg, **cfg["text_config"]}
    required = ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size")
    missing = [k for k in required if cfg.get(k) is None]
    if missing:
        raise HardwareError(f"{where}: config.json lacks {', '.join(missing)}")
    for key in _SIZES + _COUNTS:
        most = MAX_POSITION_EMBEDDINGS if key == "max_position_embeddings" else MAX_CONFIG_INT
        _config_int(cfg, key, 1 if key in _SIZES else 0, most, where)
    if not isinstance(cfg.get("tie_word_embeddings", False), (bool, type(None))):
        raise HardwareError(f"{where}: config.json field tie_word_embeddings must be true or false, "
                            f"got {repr(cfg['tie_word_embeddings'])[:40]}")
    h, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    layers = cfg["num_hidden_layers"]
    kv_heads = _get(cfg, "num_key_value_heads", default=nh)
    if nh % kv_heads:  # grouped-query attention: each KV head serves heads / kv_heads query heads
        raise HardwareError(f"{where}: config.json field num_key_value_heads is {kv_heads}, which does not divide "
                            f"the {nh} attention heads (num_attention_heads); expected a divisor of {nh}")
    mla = bool(_get(cfg, "kv_lora_rank", default=0))
    if cfg.get("head_dim") is None and not mla and h % nh:
        raise HardwareError(f"{where}: config.json has no head_dim and its {nh} attention heads "
                            f"(num_attention_heads) do not divide hidden_size {h}; give head_dim")
    if mla:
        for key in ("qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"):
            if not cfg.get(key):
                raise HardwareError(f"{where}: config.json has kv_lora_rank {cfg['kv_lora_rank']} (MLA attention) "
                                    f"but field {key} is {cfg.get(key)!r}; expected an integer >= 1")
    experts = _get(cfg, "num_experts", "n_routed_experts", "num_local_experts", default=0) or 0
    per_token = _get(cfg, "num_experts_per_tok", "experts_per_token", default=0) if experts else 0
    if experts and per_token < 1:
        raise HardwareError(f"{where}: config.json gives {experts} experts but {per_token} experts per token "
                            f"(num_experts_per_tok); a MoE model routes each token to 1 to {experts} experts")
    if per_token > experts:
        raise HardwareError(f"{where}: config.json gives {per_token} experts per token (num_experts_per_tok) but "
                            f"only {experts} experts")
    moe_width = _get(cfg, "moe_intermediate_size", "intermediate_size", default=0) if experts else 0
    if experts and moe_width < 1:
        given = cfg.get("moe_intermediate_size")
        what = (f"moe_intermediate_size {given}" if given is not None
                else "no moe_intermediate_size (nor intermediate_size)")
        raise HardwareError(f"{where}: config.json gives {experts} experts but {what}; expected each expert's "
                            "MLP width, an integer >= 1")
    first_dense = _get(cfg, "first_k_dense_replace", default=0) if experts else 0
    if first_dense > layers:
        raise HardwareError(f"{where}: config.json field first_k_dense_replace is {first_dense}, more than the "
                            f"{layers} layers (num_hidden_layers); expected 0 to {layers}")
    mlp_only = _layer_list(cfg, "mlp_only_layers", layers, where)
    step, freq = _get(cfg, "decoder_sparse_step", default=1), _get(cfg, "moe_layer_freq", default=1)
    if step > 1 and freq > 1:
        raise HardwareError(f"{where}: config.json gives both decoder_sparse_step {step} (Qwen's MoE layer "
                            f"spacing) and moe_layer_freq {freq} (DeepSeek's); expected one of them")
    layer_types = cfg.get("layer_types") or []
    if not isinstance(layer_types, list) or not all(isinstance(t, str) for t in layer_types):
        raise HardwareError(f"{where}: config.json field layer_types must be a list of strings, "
                            f"got {repr(layer_types)[:40]}")
    if layer_types and len(layer_types) != layers:
        raise HardwareError(f"{where}: config.json field layer_types names {len(layer_types)} layers; expected "
                            f"one type per layer, {layers} (num_hidden_layers)")
    sliding = sum(t == "sliding_attention" for t in layer_types)
    if sliding and not cfg.get("sliding_window"):
        raise HardwareError(f"{where}: config.json has {sliding} sliding_attention layers (layer_types) but "
                            f"sliding_window is {cfg.get('sliding_window')!r}; expected the window in tokens, >= 1")
    moe = moe_layer_count(layers, first_dense, step, freq, tuple(mlp_only)) if experts else 0
    return ModelArch(
        name=name,
        num_layers=layers,
        hidden_size=h,
        num_heads=nh,
        num_kv_heads=kv_heads,
        head_dim=_get(cfg, "head_dim", default=h // nh),
        intermediate_size=_get(cfg, "intermediate_size", default=4 * h),
        vocab_size=cfg["vocab_size"],
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        num_experts=experts,
        experts_per_token=per_token,
        moe_intermediate_size=moe_width,
        num_shared_experts=_get(cfg, "n_shared_experts", default=0) if experts else 0,
        max_position_embeddings=_get(cfg, "max_position_embeddings", default=0),
        num_dense_layers=layers - moe if experts else 0,
        q_lora_rank=_get(cfg, "q_lora_rank", default=0),
        kv_lora_rank=_get(cfg, "kv_lora_rank", default=0),
        qk_rope_head_dim=_get(cfg, "qk_rope_head_dim", default=0),
        qk_nope_head_dim=_get(cfg, "qk_nope_head_dim", default=0),
        v_head_dim=_get(cfg, "v_head_dim", default=0),
        sliding_window=_get(cfg, "sliding_window", default=0) if layer_types else 0,
        num_sliding_layers=sliding,
    )


def load_model(name_or_path: str) -> ModelArch:
    """A shipped model by name (case-insensitive) or a config.json by path (read again when
    the file changes: its size and modification time are part of the cache key).

    Raises:
        HardwareError: unknown name (the message lists the known names), unreadable (a FIFO or
            device is never read) or incomplete file.
    """
    stamp = None
    if name_or_path.lower() not in _model_files():
        try:
            st = os.stat(name_or_path)
            stamp = (st.st_size, st.st_mtime_ns, st.st_ino)
        except (OSError, ValueError):
            pass  # _load_model says why
    return _load_model(name_or_path, stamp)


@lru_cache(maxsize=64)
def _load_model(name_or_path: str, _stamp) -> ModelArch:
    key = name_or_path.lower()
    files = _model_files()
    if key in files:
        name = files[key]
        text = (_data_dir() / "models" / f"{name}.json").read_text()
    elif name_or_path.endswith(".json") or "/" in name_or_path or os.sep in name_or_path:
        name = os.path.basename(name_or_path)
        try:
            text = read_text(name_or_path)
        except NotUtf8 as exc:
            raise HardwareError(f"{exc}; expected a model config.json") from None
        except OSError as exc:
            raise HardwareError(f"cannot read model config {name_or_path}: {exc.strerror or exc}") from None
    else:
        raise HardwareError(f"unknown model {name_or_path!r} (expected one of: "
                            f"{', '.join(model_names())}, or a path to a config.json)")
    try:
        cfg = json.loads(text)
    except ValueError as exc:
        raise HardwareError(f"{name_or_path}: not JSON: {exc}") from None
    except RecursionError:
        raise HardwareError(f"{name_or_path}: JSON nested too deeply; expected a model config.json") from None
    if not isinstance(cfg, dict):
        raise HardwareError(f"{name_or_path}: expected a JSON object")
    return arch_from_config(cfg, name, name_or_path)


@frozen
class GpuSpec:
    """One GPU's capabilities (aiconfigurator-core ``systems/*.yaml``; dense, not sparse,
    tensor-core TFLOPS)."""

    name: str
    memory_bytes: int
    hbm_gb_per_s: float
    dense_tflops: dict  #: precision -> dense TFLOPS (bf16 always; fp8, fp4 where supported)
    gpus_per_node: int
    intra_node_gb_per_s: float  #: per GPU, one direction (NVLink; PCIe on L40S)
    inter_node_gb_per_s: float
    p2p_latency_us: float
    source: str
    #: host (CPU) memory per GPU of its reference system, GiB (``host_memory_source``), or
    #: None: the default size of a host KV tier (``kv_offload``)
    host_memory_gib: Optional[float] = None
    host_memory_source: str = ""

    def compute_format(self, precision: str) -> str:
        """The tensor-core format GEMMs with ``precision`` weights run in: the GPU's fastest at or above it
        (fp4 weights run in fp8 on an H100, fp8 in bf16 on an A100: weight-only quantisation)."""
        faster = {"fp4": ("fp4", "fp8"), "fp8": ("fp8",)}.get(precision, ())
        return next((p for p in faster if p in self.dense_tflops), "bf16")

    def tflops(self, precision: str) -> float:
        """Dense TFLOPS for GEMMs with ``precision`` weights, in :meth:`compute_format`."""
        return float(self.dense_tflops[self.compute_format(precision)])


@lru_cache(maxsize=None)
def _gpus() -> dict:
    return json.loads((_data_dir() / "gpus.json").read_text())


def gpu_names() -> list[str]:
    """The shipped GPU names."""
    return list(_gpus())


def _lookup(table: dict, name: str, what: str) -> str:
    for key in table:
        if key.lower() == name.lower() or table[key].get("aic_system") == name.lower():
            return key
    raise HardwareError(f"unknown {what} {name!r} (expected one of: {', '.join(table)})")


#: shipped model -> the Hugging Face id aiconfigurator-core knows it by (its model_configs/)
AIC_MODEL_PATHS = {
    "Llama-3.1-8B": "meta-llama/Meta-Llama-3.1-8B", "Llama-3.1-70B": "meta-llama/Meta-Llama-3.1-70B",
    "Qwen3-32B": "Qwen/Qwen3-32B", "Qwen3-235B-A22B": "Qwen/Qwen3-235B-A22B",
    "gpt-oss-120b": "openai/gpt-oss-120b", "DeepSeek-V3": "deepseek-ai/DeepSeek-V3",
}


def aic_model_path(model: str) -> str:
    """The aiconfigurator-core model id of a shipped model name.

    Raises:
        HardwareError: not a shipped model (a config.json path has no aiconfigurator data).
    """
    key = _model_files().get(model.lower())
    if key not in AIC_MODEL_PATHS:
        raise HardwareError(f"the aic latency model needs a shipped model name "
                            f"({', '.join(AIC_MODEL_PATHS)}), got {model!r}")
    return AIC_MODEL_PATHS[key]


def aic_system(gpu: str) -> str:
    """aiconfigurator-core's system name of a shipped GPU (``H100`` -> ``h100_sxm``)."""
    return _gpus()[_lookup(_gpus(), gpu, "gpu")]["aic_system"]


def load_gpu(name: str) -> GpuSpec:
    """The shipped GPU ``name`` (case-insensitive; aiconfigurator's system names such as
    ``h100_sxm`` also work).

    Raises:
        HardwareError: unknown name (the message lists the known names).
    """
    key = _lookup(_gpus(), name, "gpu")
    row = {k: v for k, v in _gpus()[key].items() if k != "aic_system"}
    return GpuSpec(name=key, **row)


@frozen
class Calibration:
    """Roofline efficiencies (fractions of peak) and fixed overheads of one GPU."""

    gemm_compute_eff: float = 0.7
    gemm_memory_eff: float = 0.8
    #: quantized weights (fp8, fp4): the pass that quantizes each GEMM's input activations
    #: (read bf16, write the weights' precision) reaches this fraction of HBM bandwidth
    quant_memory_eff: float = 0.5
    attention_compute_eff: float = 0.5
    attention_memory_eff: float = 0.7
    comm_eff: float = 0.7
    allreduce_latency_us: float = 10.0
    layer_overhead_us: float = 10.0
    pass_overhead_ms: float = 2.0
    #: host time per request that samples a token in the pass (input preparation, sampling,
    #: output processing: the engine's per-request CPU work that scales with the batch)
    sequence_overhead_us: float = 0.0
    #: time per layer for each request that samples a token in the pass (per-request work
    #: inside every layer: attention over the request's own KV pages, its cache append)
    request_layer_overhead_us: float = 0.0
    #: the serving frontend's time per request before the engine (ms) and from its tokens to
    #: the client (ms): what the client's TTFT holds beyond the engine (benchmarks/calibrate_roofline.py)
    dispatch_overhead_ms: float = 0.0
    first_token_overhead_ms: float = 0.0
    #: host time the ``aic`` model adds to aiconfigurator's kernel sums, per pass (ms) and per
    #: request sampled in it (us): fitted on calibration rows' TPOT with that model
    aic_pass_overhead_ms: float = 0.0
    aic_sequence_overhead_us: float = 0.0
    source: str = "default (no fit for this GPU)"


@lru_cache(maxsize=None)
def _calibration_table() -> dict:
    return json.loads((_data_dir() / "calibration.json").read_text())


def load_calibration(gpu: str, backend: Optional[str] = None, moe: bool = False,
                     precision: Optional[str] = None, async_scheduling: bool = False) -> Calibration:
    """The fitted calibration of ``gpu`` from ``data/calibration.json``; GPUs without their
    own fit take the entry named ``default`` (documented there). With ``precision`` (bf16,
    fp8, fp4) the GEMM efficiencies fitted for that precision on that GPU (``gemm``) replace
    the GPU's bf16 ones. With ``backend`` (vllm, sglang, trtllm) the fixed overheads fitted for
    that engine on that GPU replace the GPU's, when the fit exists, and so do the GEMM
    efficiencies of that engine's kernels (its ``gemm``); with ``moe`` too, the overheads
    fitted on that engine's mixture-of-experts rows (``<backend>/moe``) replace them in turn,
    when that fit exists. With ``async_scheduling`` (vLLM's ``--async-scheduling``: the next
    pass scheduled while one runs) a dense model takes ``<backend>/async``, when fitted."""
    table = _calibration_table()
    entry = dict(table.get(gpu) or table["default"])
    entry.update(entry.get("gemm", {}).get(precision, {}))
    if backend is not None:
        fits = entry.get("backends", {})
        mine = fits.get(backend, {})
        entry.update(mine)
        entry.update(mine.get("gemm", {}).get(precision, {}))
        if moe:
            entry.update(fits.get(f"{backend}/moe", {}))
        elif async_scheduling:
            entry.update(fits.get(f"{backend}/async", {}))
    fields = Calibration.__attrs_attrs__
    return Calibration(**{f.name: entry[f.name] for f in fields if f.name in entry})


def weights_bytes(arch: ModelArch, precision: str) -> float:
    """Bytes of all weights: linear layers at ``precision``; embeddings, router and norms in
    bf16 (quantised checkpoints keep them so)."""
    p = arch.params()
    linear = p["attention"] + p["dense_mlp"] + p["experts"] + p["shared_experts"]
    return linear * PRECISION_BYTES[precision] + (p["embedding"] + p["router"]) * 2.0


def kv_shard_fraction(arch: ModelArch, tp: int) -> float:
    """Fraction of a token's KV one of ``tp`` ranks stores: KV heads split over ranks, each
    rank holding at least one head (heads are replicated when KV heads < TP, as in vLLM); MLA's
    single latent is replicated on every rank (vLLM's MLA backends)."""
    if arch.is_mla:
        return 1.0
    return -(-arch.num_kv_heads // tp) / arch.num_kv_heads


def kv_capacity_blocks(spec, block_size: int) -> int:
    """KV blocks per worker of ``tensor_parallel_size`` GPUs, from memory (vLLM's sizing):

        (GPU memory * gpu_memory_utilization - weights / TP - reserved) /
        (block_size * KV bytes per token * kv_shard_fraction)

    ``spec`` is a :class:`simkit.spec.RooflineLatency`.

    Raises:
        ValueError: the weights and the reserve leave no room for one block (names the sizes).
    """
    arch, gpu = load_model(spec.model), load_gpu(spec.gpu)
    tp = spec.tensor_parallel_size
    weights = weights_bytes(arch, spec.precision) / tp
    reserved = spec.reserved_memory_gib * 2**30
    free = gpu.memory_bytes * spec.gpu_memory_utilization - weights - reserved
    per_block = block_size * arch.kv_bytes_per_token(spec.kv_precision) * kv_shard_fraction(arch, tp)
    blocks = int(free // per_block) if free > 0 else 0
    if blocks < 1:
        raise ValueError(
            f"{arch.name} ({spec.precision}) does not fit on {gpu.name} at TP {tp}: weights "
            f"{weights / 1e9:.1f} GB + reserve {reserved / 1e9:.1f} GB per GPU leave "
            f"{max(free, 0) / 1e9:.1f} GB of {gpu.memory_bytes * spec.gpu_memory_utilization / 1e9:.1f} GB "
            f"usable, less than one KV block; raise tensor_parallel_size or lower the precision")
    return blocks


def check_tensor_parallel(arch: ModelArch, tp: int) -> None:
    """Raise ValueError unless ``tp`` GPUs can split ``arch``'s attention as vLLM does: the
    query heads evenly, and the KV heads evenly or each replicated over ``tp / kv_heads`` GPUs
    (MLA models have one shared latent KV: only the query heads count). Source: vLLM's
    ``ModelConfig.verify_with_parallel_config`` (heads divisible by TP) and
    ``QKVParallelLinear`` (KV heads replicated when TP exceeds them)."""
    if arch.num_heads % tp:
        raise ValueError(f"tensor_parallel_size {tp} does not divide {arch.name}'s {arch.num_heads} attention heads")
    kv = arch.num_kv_heads
    if not arch.kv_lora_rank and kv % tp and tp % kv:
        raise ValueError(f"tensor_parallel_size {tp} neither divides nor is a multiple of {arch.name}'s "
                         f"{kv} KV heads")
