"""Rows of aiconfigurator-core's ``systems/silicon_sample.csv`` as simkit deployments.

Shared by benchmarks/calibrate_roofline.py (which fits the fixed overheads on the calibration
subset) and benchmarks/silicon_accuracy.py (which scores the other rows). A row becomes a
scenario: the roofline model of its model, GPU, precision and TP (x attention-DP: the GPUs of
one worker), aggregated (one worker per ``batch_size`` of concurrency) or disaggregated
(``prefill_num_workers`` and ``decode_num_workers``, each pool with its own TP, an
instantaneous KV link); the workload is the row's benchmark client (:func:`harness_for`):
``prompts_per_user`` x concurrency prompts sent through ``concurrency`` slots (a closed loop:
each slot sends the next prompt when its request ends), all at time 0.

Two harnesses measured the rows, told apart by ``silicon_data_source``:

* **InferenceMAX** (SemiAnalysis, Apache-2.0; rows ``source_file=2026-04-06.csv`` and
  ``db-dump``): its ``benchmarks/*.sh`` run ``benchmark_serving.py --dataset-name random
  --random-range-ratio 0.8 --num-prompts $((CONC * 10)) --max-concurrency $CONC
  --request-rate inf --ignore-eos``; that client draws each prompt's ISL and OSL uniformly
  from ``[int(0.8 x), x]`` and reports means over all prompts, the first wave included.
  Its Llama-3.1-70B servers are configured as the scripts do (:func:`_inferencemax_engine`).
* **NVIDIA's gap analysis** (``source_file=.../aic-auto-gap-analysis/...``, Dynamo
  deployments): the client is not published (NVIDIA names aiperf); fixed ISL and OSL, by
  default 3 prompts per user with the first wave excluded (the steady state), as before these
  harnesses were told apart, and per family the client its calibration rows chose
  (:data:`GAP_ANALYSIS_CLIENTS`: aiperf's 10 x C or 20 x C prompts with the first wave scored,
  or users desynchronized). The engines
  run their defaults: SGLang's and TRT-LLM's overlap schedulers are on
  (``async_scheduling``), vLLM 0.12's async scheduling is off.

Engine defaults and scripts are facts about the harness; where a choice was open (whether
NVIDIA's vLLM rows ran async scheduling) the calibration rows decided, never the scored ones.
"""

from __future__ import annotations

import hashlib
import re
import sys
from dataclasses import dataclass, field
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import NoReturn, Optional

import numpy as np
import pandas as pd

from simkit import scenario_from_dict
from simkit.engine.hardware import load_calibration, load_model
from simkit.core.request import Request
from simkit.sim import simulate

#: silicon_sample.csv model_path -> simkit model (R1 and V3.1 share DeepSeek-V3's shape)
SILICON_MODELS = {
    "meta-llama/Llama-3.1-8B-Instruct": "Llama-3.1-8B", "nvidia/Llama-3.1-8B-Instruct-FP8": "Llama-3.1-8B",
    "meta-llama/Llama-3.1-70B": "Llama-3.1-70B", "Qwen/Qwen3-32B": "Qwen3-32B",
    "nvidia/Qwen3-32B-NVFP4": "Qwen3-32B", "Qwen/Qwen3-235B-A22B-FP8": "Qwen3-235B-A22B",
    "openai/gpt-oss-120b": "gpt-oss-120b", "deepseek-ai/DeepSeek-V3": "DeepSeek-V3",
    "deepseek-ai/DeepSeek-R1": "DeepSeek-V3", "nvidia/DeepSeek-R1-NVFP4": "DeepSeek-V3",
    "nvidia/DeepSeek-V3.1-NVFP4": "DeepSeek-V3",
}
SILICON_GPUS = {"a100_sxm": "A100", "h100_sxm": "H100", "h200_sxm": "H200", "b200_sxm": "B200",
                "gb200": "GB200", "b300_sxm": "B300", "gb300": "GB300", "l40s": "L40S"}
INT_COLS = ["tp_size", "pp_size", "attention_dp_size", "batch_size", "prefill_num_workers",
            "prefill_tp_size", "prefill_attention_dp_size", "decode_num_workers", "decode_tp_size",
            "decode_attention_dp_size", "decode_batch_size", "prefill_batch_size", "moe_tp_size", "moe_ep_size",
            "prefill_moe_tp_size", "prefill_moe_ep_size", "decode_moe_tp_size", "decode_moe_ep_size",
            "prefill_pp_size", "decode_pp_size"]


def worker_gpus(row, prefix: str = "") -> int:
    """GPUs of one worker: attention TP x PP x attention-DP, or the MoE TP x EP if larger.
    simkit prices them as one tensor-parallel group of that size (attention DP and expert
    parallelism are not modelled apart)."""
    attention = max(1, row[f"{prefix}tp_size"]) * max(1, row[f"{prefix}pp_size"]) * max(1, row[f"{prefix}attention_dp_size"])
    return max(attention, max(1, row[f"{prefix}moe_tp_size"]) * max(1, row[f"{prefix}moe_ep_size"]))


#: the columns that name a deployment: what ran where (model, GPU, engine, precision, mode,
#: parallelism, batch sizes and worker counts), not the workload or when it was measured
DEPLOYMENT_COLUMNS = ("system", "model_path", "backend", "mode", "precision", "gemm_quant_mode", "moe_quant_mode",
                      *INT_COLS)


def deployment_key(row) -> str:
    """The row's deployment and client concurrency, as text (:data:`DEPLOYMENT_COLUMNS`)."""
    return "|".join(str(row[c]) for c in DEPLOYMENT_COLUMNS) + f"|c{concurrency(row)}"


def calibration_row(row) -> bool:
    """Whether a row belongs to the calibration subset: one deployment-and-concurrency in four,
    by SHA-256 of :func:`deployment_key`. The CSV repeats measurements under other ids (796
    DeepSeek and 142 gpt-oss rows are exact copies of others; split by id, 248 groups of copies
    sat on both sides), so a split by id leaks scored rows into the fit; every ISL/OSL of one
    deployment at one concurrency falls on one side."""
    return hashlib.sha256(deployment_key(row).encode()).digest()[0] % 4 == 0


def input_error(message: str) -> NoReturn:
    """Stop a benchmark script on bad input: ``message`` as one line on stderr, exit code 2
    (as simkit's own commands do)."""
    print(message, file=sys.stderr)
    raise SystemExit(2)


def find_silicon() -> Optional[Path]:
    """silicon_sample.csv of an installed aiconfigurator_core, else of the wheel unpacked in
    /tmp/aic/x (the module docstring of silicon_accuracy.py), else None."""
    try:
        p = resources.files("aiconfigurator_core") / "systems" / "silicon_sample.csv"
        if p.is_file():
            return Path(str(p))
    except ModuleNotFoundError:
        pass
    p = Path("/tmp/aic/x/aiconfigurator_core/systems/silicon_sample.csv")
    return p if p.is_file() else None


#: columns a silicon_sample.csv must have, besides :data:`INT_COLS`
REQUIRED_COLUMNS = ("id", "system", "model_path", "backend", "mode", "precision", "gemm_quant_mode", "isl", "osl",
                    "silicon_ttft_ms", "silicon_tpot_ms", "silicon_data_source")


def load_rows(path: Path) -> list[dict]:
    """The rows of aiconfigurator-core's ``silicon_sample.csv`` at ``path``, integer columns
    filled with 0. A file that cannot be read, or lacks a column simkit reads, stops the
    script with one line and exit code 2 (:func:`input_error`)."""
    try:
        df = pd.read_csv(path)
    except (OSError, ValueError) as exc:  # missing, unreadable, or not CSV (pandas' parser errors)
        input_error(f"{path}: cannot read it as silicon_sample.csv ({type(exc).__name__}: {exc})")
    missing = [c for c in (*REQUIRED_COLUMNS, *INT_COLS) if c not in df.columns]
    if missing:
        input_error(f"{path}: not aiconfigurator-core's silicon_sample.csv: no column(s) {', '.join(missing)}")
    try:
        df[INT_COLS] = df[INT_COLS].fillna(0).astype(int)
    except (TypeError, ValueError) as exc:
        input_error(f"{path}: expected integers in {', '.join(INT_COLS[:3])}, ...: {exc}")
    return df.to_dict("records")


def precision(row) -> str:
    """Weight precision of a row: fp8, fp4 or bf16 ("" for others, e.g. int4); a row that
    states none is taken as its checkpoint's bf16."""
    p = row["gemm_quant_mode"] if isinstance(row["gemm_quant_mode"], str) else row["precision"]
    p = str(p).lower() if isinstance(p, str) else "bf16"
    if p.startswith("fp8"):
        return "fp8"
    if "fp4" in p:
        return "fp4"
    return "bf16" if p in ("bf16", "float16", "fp16") else ""


def skip_reason(row) -> str:
    """Why simkit cannot model a row ("" when it can)."""
    if row["model_path"] not in SILICON_MODELS or row["system"] not in SILICON_GPUS:
        return f"model/system not shipped ({row['model_path']}, {row['system']})"
    if not precision(row):
        return f"precision {row['gemm_quant_mode']}"
    if not concurrency(row):
        return "concurrency not stated"
    return ""


def concurrency(row) -> int:
    """The row's client concurrency (``silicon_concurrency=N`` in its source, else ``_cN_`` in
    its id); 0 when it states none."""
    m = re.search(r"silicon_concurrency=(\d+)", str(row["silicon_data_source"]))
    if m:
        return int(m.group(1))
    m = re.search(r"_c(\d+)_", row["id"])
    return int(m.group(1)) if m else 0


@dataclass(frozen=True)
class Harness:
    """How a row was measured: the benchmark client and the server settings.

    ``range_ratio``: each prompt's ISL and OSL are drawn uniformly from ``[int(r x), x]`` (1:
    fixed). ``prompts_per_user`` x concurrency prompts are sent; ``score_first_wave``: the
    reported means include the first ``concurrency`` prompts (sent together at time 0).
    ``engine``: pool settings; ``kv_cache_dtype``: None for the weights' (fp8 KV with fp8 or
    fp4 weights, else bf16).
    """

    name: str
    range_ratio: float = 1.0
    prompts_per_user: int = 3
    score_first_wave: bool = False
    engine: dict = field(default_factory=dict)
    kv_cache_dtype: Optional[str] = None
    #: a client delay per prompt drawn uniformly from [0, jitter_ms) (the scenario's
    #: ``dispatch_jitter_ms``, a frontend delay inside the measured TTFT): identical users
    #: fall out of lockstep
    jitter_ms: float = 0.0
    #: a client turnaround per prompt drawn uniformly from [0, think_ms) before it is sent
    #: (the request's ``delay_s`` after the user's last prompt ends; the first prompt's
    #: arrival for the first): outside the measured TTFT, as a client's own time is
    think_ms: float = 0.0
    #: user u sends its first prompt ``u / C x stagger_s`` late (0: all together, a burst)
    stagger_s: float = 0.0
    #: how far the users are desynchronized: user u starts ``u / C x desync`` of a cycle late
    #: (a cycle: a lockstep run's mean E2E, so ``stagger_s`` = desync x that E2E); 0: lockstep,
    #: 1: spread over a whole cycle. Per family, chosen on its calibration rows
    #: (:data:`GAP_ANALYSIS_CLIENTS`)
    desync: float = 0.0
    #: the server's speculative decoding (a pool's ``speculative`` mapping), None: off
    #: (:func:`speculative_for`)
    speculative: Optional[dict] = None
    #: the server admits this many requests fewer than the users at once (its max batch
    #: ``C - slots_short`` on one worker, where the row's batch holds the whole concurrency):
    #: one user more than slots waits a completion, so TTFT grows by about E2E / C with the
    #: output length. A deployment property chosen per family (:data:`GAP_ANALYSIS_CLIENTS`)
    slots_short: int = 0
    #: aiperf's ``--num-dataset-entries`` (its default 100): each prompt, warm-up ones included,
    #: is one of that many distinct prompts drawn uniformly with replacement (aiperf's
    #: synthetic-dataset sampling before it had ``--dataset-sampling-strategy``), so a server
    #: with prefix caching (``engine``'s ``enable_prefix_caching``) hits a repeated prompt's
    #: blocks; 0: every prompt distinct
    dataset_entries: int = 0
    #: warm-up prompts per user sent before the scored ones (aiconfigurator's ``bench_run.sh``:
    #: ``--warmup-request-count 2 x C``), never scored; the scored prompts start together once
    #: every warm-up response is in (aiperf's phases)
    warmup_per_user: int = 0
    #: the server started with the flags aiconfigurator's benchmark generator writes for the
    #: row (:func:`aiconfigurator_flags`) over the engine's defaults
    generated_flags: bool = False


def aiconfigurator_flags(row) -> dict:
    """The server flags aiconfigurator's benchmark generator writes for ``row``, as simkit
    pool settings: vLLM ``max_num_batched_tokens`` = batch + ISL + 1500; TRT-LLM the same
    ``max_num_tokens`` with chunked prefill off; SGLang ``max_prefill_tokens`` ISL + 1500,
    ``chunked_prefill_size`` 8192 and mixed chunks (ai-dynamo/aiconfigurator,
    ``generator/rule_plugin/benchmark/{vllm,trtllm,sglang}.rule``)."""
    batch, isl = int(row["batch_size"]) or concurrency(row), int(row["isl"])
    if row["backend"] == "vllm":
        return {"max_num_batched_tokens": batch + isl + 1500}
    if row["backend"] == "trtllm":
        return {"max_num_batched_tokens": batch + isl + 1500, "enable_chunked_prefill": False}
    return {"sglang": {"max_prefill_tokens": isl + 1500, "chunked_prefill_size": 8192,
                       "enable_mixed_chunk": True}}


def _inferencemax_engine(row) -> tuple[dict, Optional[str]]:
    """Server settings of InferenceMAX's Llama-3.1-70B scripts (``benchmarks/70b_fp8_*.sh``,
    ``MAX_MODEL_LEN`` = ISL + OSL from its sweep workflow); other models' servers are left at
    simkit's defaults for the row.

    vLLM (``--max-num-batched-tokens 8192 --no-enable-prefix-caching --async-scheduling``):
    ``--max-num-seqs $CONC`` on H100 and H200, 512 on B200; KV cache fp8 (``kv-cache-dtype:
    fp8``) on H200 and B200, the checkpoint's bf16 on H100 (its docker script sets none).
    TRT-LLM (``kv_cache_config: dtype fp8, enable_block_reuse false``, no chunked prefill, its
    default): ``--max_num_tokens 16384``, and for 1k/1k below TP 8 ``batch_wait_timeout_iters:
    20, batch_wait_max_tokens_ratio: 0.9`` (the H200 script's). The stored B200 script
    (``--max_num_tokens $MAX_MODEL_LEN``, no batch waiting) is likely not the version the runs used:
    on the B200 calibration rows it scores TTFT MAPE 41% against 24% with the H200 settings,
    whose batch waiting shows in the measured 1k/1k TTFTs; the B200 rows take those.
    """
    if SILICON_MODELS.get(row["model_path"]) != "Llama-3.1-70B":
        return {}, None
    system, isl, osl = row["system"], int(row["isl"]), int(row["osl"])
    if row["backend"] == "vllm":
        engine = {"max_num_seqs": 512 if system == "b200_sxm" else concurrency(row),
                  "max_num_batched_tokens": 8192, "async_scheduling": True}
        return engine, "auto" if system == "h100_sxm" else "fp8"
    if row["backend"] == "trtllm":  # TRT-LLM's overlap scheduler is on by default
        engine = {"max_num_batched_tokens": 16384, "enable_chunked_prefill": False, "async_scheduling": True}
        if isl == 1024 and osl == 1024 and worker_gpus(row) < 8:
            engine["trtllm"] = {"batch_wait_timeout_iters": 20, "batch_wait_max_tokens_ratio": 0.9}
        return engine, "fp8"
    return {}, None


#: The InferenceMAX image that only its DeepSeek-R1 MTP configurations ran: in its
#: ``.github/configs/nvidia-master.yaml`` from February to April 2026 (the rows' measurement
#: dates), ``dsr1-fp4-b200-trt-mtp`` and ``dsr1-fp8-b200-trt-mtp`` use
#: ``nvcr.io#nvidia/tensorrt-llm/release:1.2.0rc6.post3`` and the plain ``dsr1-fp*-b200-trt``
#: ``rc6.post2``. Elsewhere (SGLang on B200, TRT-LLM on H200) the MTP and plain configurations
#: share an image, so no field of the CSV tells their rows apart and they stay unmodelled.
MTP_IMAGE = "tensorrt-llm/release:1.2.0rc6.post3"

#: Conditional acceptance of each MTP draft on InferenceMAX's random-token prompts, the same
#: at every position. Not published; chosen on the calibration rows only (the TPOT MAPE of
#: the MTP rows among them, ``python benchmarks/silicon_accuracy.py --calibration-rows
#: --models DeepSeek-V3 --backends trtllm --systems b200_sxm --mtp-acceptance A`` for A in
#: 0.3 ... 0.9; see README "Real hardware").
MTP_ACCEPTANCE = 0.7


def speculative_for(row, acceptance: Optional[float] = None) -> Optional[dict]:
    """The speculative decoding a row's server ran, as a pool's ``speculative`` mapping, or
    None. Only InferenceMAX's B200 TRT-LLM DeepSeek-R1 MTP rows are told apart
    (:data:`MTP_IMAGE`); their scripts (``benchmarks/single_node/dsr1_fp{4,8}_b200_trt_mtp.sh``)
    set ``speculative_config: decoding_type: MTP, num_nextn_predict_layers: 3``, or 1 with
    attention DP. ``acceptance`` overrides :data:`MTP_ACCEPTANCE`; the expected-value mode
    (no sampling noise in a mean over the row's requests)."""
    source = str(row["silicon_data_source"]).replace("#", "/")
    if row["system"] != "b200_sxm" or row["backend"] != "trtllm" or MTP_IMAGE not in source:
        return None
    if SILICON_MODELS.get(row["model_path"]) != "DeepSeek-V3":
        return None
    k = 1 if max(1, row["attention_dp_size"]) > 1 else 3
    a = MTP_ACCEPTANCE if acceptance is None else acceptance
    return {"method": "mtp", "num_speculative_tokens": k, "acceptance_rates": [a] * k, "sampling": "expected"}


#: The client of NVIDIA's gap-analysis rows per (system, backend), where a family's calibration
#: rows chose one other than the default (3 prompts per user, the first wave not scored, the
#: users in lockstep). Each family's dense calibration rows were scored under every candidate,
#: on the calibration table fitted under the default client (``python
#: benchmarks/silicon_harness_variants.py --variants steady3,aiperf10,aiperf20,desync0,desync0.25,
#: desync0.5,desync0.75,desync1,aiperf10_desync0.5,aiperf10_desync1,aiperf20_desync1``), and a
#: candidate kept only where it lowered the family's TTFT MAPE without raising its TPOT MAPE:
#:
#: * aiperf (the client NVIDIA names; its recipes in aiconfigurator score 10 x C or 20 x C
#:   prompts after a warm-up that ends with the engine idle, the first wave scored):
#:   H100 vLLM 24 rows, TTFT / TPOT 44.6 / 8.1% -> 31.2 / 6.2% with 10 x C (39.0 / 6.5 with
#:   20 x C); H100 TRT-LLM 78 rows, 29.7 / 9.8% -> 26.7 / 9.2% with 20 x C (32.1 / 8.9 with
#:   10 x C); H100 SGLang unchanged (9.8% every way), so it keeps the default.
#: * users desynchronized (user u starts ``u / C x desync`` of a cycle late): H200 SGLang 13
#:   rows, TTFT 190.2 / 188.2 / 118.2 / 89.2 / 84.7% from lockstep to a whole cycle; H200 vLLM 6
#:   rows, 166.2 / 129.9 / 66.3 / 55.2 / 25.2%; every H100 family is closest in lockstep (e.g.
#:   TRT-LLM 29.7 / 42.5 / 61.6 / 73.4 / 77.9%), and aiperf's protocol desynchronized is worse
#:   than lockstep on every H100 family (TTFT 44-81%).
#:
#: With the overheads refitted under these clients (calibrate_roofline.py), the choice still
#: holds on the calibration rows: TTFT / TPOT MAPE 29.3 / 8.2% against 33.0 / 11.0% for the
#: default client everywhere (``--variants current,steady3,aiperf10,aiperf20``).
#:
#: A (system, backend, model) entry overrides its (system, backend) one. The H100 Llama-3.1-8B
#: TRT-LLM rows show TTFT growing by about E2E / C with the output length (one user more than
#: the server's slots); its 36 calibration rows chose aiperf 20 x C with the server one slot
#: short (``slots_short``: TTFT / TPOT 28.4 / 5.3% -> 21.8 / 4.4%, ``--variants
#: current,aiperf20,aiperf20_slots_c_minus_1 --systems h100_sxm --backends trtllm``), while the
#: same engine's Qwen3-32B rows went from 25.2 to 43.4% under it, and every other family was worse
#: too with one slot short under each client tried (H100 vLLM 31.4 -> 130-136%, SGLang 9.8 ->
#: 15.5-22.7%, H200 SGLang 72.8 -> 246-262%), so it is that family's alone.
#:
#: H200 Llama-3.1-8B vLLM FP8 (6 calibration rows) chose its own client, its frontend term
#: refitted per candidate (``--systems h200_sxm --backends vllm --refit-frontend``) on the table
#: fitted before: aiconfigurator's ``bench_run.sh`` as written (a 2 x C warm-up, every prompt one
#: of aiperf's 100 dataset entries, the server's prefix cache on: vLLM's default), TTFT / TPOT
#: 26.8 / 42.9% (users desynchronized) -> 26.2 / 31.8%. Its rows need prompt throughput near
#: the GPU's FP8 peak while decoding without it (e.g. ISL 1000, C 112: 94k prompt tokens/s).
#: With the overheads refitted per client, the TPOT error of a fit that leaves each calibration
#: deployment out is 47.9% under the old client and 9.5% under this one (the same engine's
#: Llama-3.1-70B rows' 10.6 -> 7.1%: they share the engine's fit).
#:
#: H100 Qwen3-32B TRT-LLM's 42 calibration rows chose aiperf 10 x C against a server started
#: with aiconfigurator's generated flags (``Harness.generated_flags``): TTFT / TPOT 25.1 / 7.3%
#: -> 20.0 / 7.0% (``--systems h100_sxm --backends trtllm --refit-frontend``, 16 candidates;
#: the engine's Llama-3.1-8B rows 21.6 / 4.3 -> 20.5 / 5.3%, TPOT up, so not theirs). Not in
#: the table yet: refitted, it moves the H100 fits every shipped scenario's figures in the
#: README come from, which are to be rerun with it.
GAP_ANALYSIS_CLIENTS = {
    ("h100_sxm", "vllm"): {"prompts_per_user": 10, "score_first_wave": True},
    ("h100_sxm", "trtllm"): {"prompts_per_user": 20, "score_first_wave": True},
    ("h100_sxm", "trtllm", "Llama-3.1-8B"): {"prompts_per_user": 20, "score_first_wave": True,
                                             "slots_short": 1},
    ("h200_sxm", "sglang"): {"desync": 1.0},
    ("h200_sxm", "vllm"): {"desync": 1.0},
    ("h200_sxm", "vllm", "Llama-3.1-8B"): {"prompts_per_user": 10, "score_first_wave": True,
                                           "warmup_per_user": 2, "dataset_entries": 100,
                                           "engine": {"enable_prefix_caching": True}},
}


def harness_for(row) -> Harness:
    """The harness that measured ``row`` (see the module docstring). SGLang's and TRT-LLM's
    overlap schedulers are on by default (``async_scheduling``); vLLM's async scheduling only
    where the server was started with it."""
    overlap = {"async_scheduling": row["backend"] in ("sglang", "trtllm")}
    if "aic-auto-gap-analysis" in str(row["silicon_data_source"]):
        model = SILICON_MODELS.get(row["model_path"])
        client = GAP_ANALYSIS_CLIENTS.get((row["system"], row["backend"], model),
                                          GAP_ANALYSIS_CLIENTS.get((row["system"], row["backend"]), {}))
        client = dict(client)
        return Harness("nvidia", engine={**overlap, **client.pop("engine", {})}, **client)
    engine, kv = _inferencemax_engine(row)
    return Harness("inferencemax", range_ratio=0.8, prompts_per_user=10, score_first_wave=True,
                   engine={**overlap, **engine}, kv_cache_dtype=kv, speculative=speculative_for(row))


def scenario_for(row, conc: int, overheads: Optional[dict] = None, latency_model: str = "roofline",
                 harness: Optional[Harness] = None) -> dict:
    """The scenario (a dict) of a row; ``overheads`` overrides the fitted fixed overheads
    (``layer_overhead_us``, ``pass_overhead_ms``); ``latency_model`` roofline or aic (the
    database of the row's backend, latest version); ``harness`` (default: the row's) gives
    the server settings."""
    harness = harness or harness_for(row)
    model, gpu, prec = SILICON_MODELS[row["model_path"]], SILICON_GPUS[row["system"]], precision(row)
    isl = int(row["isl"])
    engine = {"max_num_batched_tokens": max(8192, isl), "enable_prefix_caching": False, "backend": row["backend"]}
    engine.update(harness.engine)
    if harness.generated_flags:
        engine.update(aiconfigurator_flags(row))
    kv_dtype = harness.kv_cache_dtype or ("fp8" if prec != "bf16" else "auto")

    def latency(tp: int, prefix: str = "") -> dict:
        extra = dict(overheads or {})
        dp = max(1, row[f"{prefix}attention_dp_size"])
        if latency_model == "roofline" and dp > 1 and "sequence_overhead_us" not in extra:
            # attention-DP ranks prepare and sample their own requests in parallel: the
            # worker's host time per request is the per-rank one over the ranks
            moe = load_model(model).is_moe
            extra["sequence_overhead_us"] = load_calibration(gpu, row["backend"], moe).sequence_overhead_us / dp
        if harness.jitter_ms:
            extra["dispatch_jitter_ms"] = harness.jitter_ms
        return {"kind": latency_model, "model": model, "gpu": gpu, "precision": prec, "tensor_parallel_size": tp,
                "kv_cache_dtype": kv_dtype, "backend": row["backend"], **extra}

    if row["mode"] == "agg":
        tp = worker_gpus(row)
        # a missing batch size (some rows): the whole concurrency on one worker
        batch = row["batch_size"] * max(1, row["attention_dp_size"]) or conc
        pools = {"aggregated": {"workers": max(1, -(-conc // batch)), "max_num_seqs": batch, **engine}}
        if harness.speculative:
            pools["aggregated"]["speculative"] = dict(harness.speculative)
        if "max_num_seqs" in harness.engine:  # the server's own limit, on one worker
            pools["aggregated"]["workers"] = 1
        if harness.slots_short and batch >= conc:
            pools["aggregated"].update(workers=1, max_num_seqs=max(1, conc - harness.slots_short))
        lat = latency(tp)
    else:
        ptp, dtp = worker_gpus(row, "prefill_"), worker_gpus(row, "decode_")
        dworkers = max(1, row["decode_num_workers"])
        # a missing decode batch size (some rows): the concurrency shared by the decode workers
        dbatch = row["decode_batch_size"] * max(1, row["decode_attention_dp_size"]) or -(-conc // dworkers)
        lat = latency(dtp, "decode_")
        pools = {"prefill": {"workers": max(1, row["prefill_num_workers"]), **engine,
                             "latency": latency(ptp, "prefill_")},
                 "decode": {"workers": dworkers, "max_num_seqs": dbatch, **engine}}
        if harness.speculative:
            pools["decode"]["speculative"] = dict(harness.speculative)
    # the users are chains of prompts (client_requests): each sends its next when the last ends
    return {"name": row["id"], "latency": lat, "pools": pools,
            "workload": {"kind": "trace", "path": "silicon_sample.csv", "format": "csv"}}


def client_requests(row, conc: int, harness: Harness) -> list[Request]:
    """The prompts the row's benchmark client sends: ``conc`` users, each a chain of
    ``prompts_per_user`` prompts (the next sent when the last ends: the client's closed loop),
    user u's first at ``u / conc x stagger_s``. ISL and OSL uniform in ``[int(r x), x]`` with r
    the harness's ``range_ratio``, drawn from a generator seeded by the row id (deterministic).
    A user's first prompt has no ``deps``. With ``warmup_per_user`` w, ids 0 .. w x conc - 1 are
    the warm-up chains (w per user, from time 0) and each user's first scored prompt waits for
    the last prompt of every warm-up chain. With ``dataset_entries`` N, each prompt (warm-up
    included) names the blocks of one of N distinct prompts (``hash_ids``, 64-token blocks),
    drawn uniformly with replacement from a generator seeded by the row id."""
    isl, osl = int(row["isl"]), int(row["osl"])
    per, warm = harness.prompts_per_user, harness.warmup_per_user
    n_warm = warm * conc
    n = per * conc + n_warm
    if harness.range_ratio < 1:
        rng = np.random.default_rng(int.from_bytes(hashlib.sha256(row["id"].encode()).digest()[:8], "little"))
        isls = rng.integers(int(isl * harness.range_ratio), isl + 1, size=n)
        osls = rng.integers(int(osl * harness.range_ratio), osl + 1, size=n)
    else:
        isls, osls = np.full(n, isl), np.full(n, osl)
    think = np.zeros(n)
    if harness.think_ms:
        seed = int.from_bytes(hashlib.sha256(f"{row['id']}/think".encode()).digest()[:8], "little")
        think = np.random.default_rng(seed).uniform(0.0, harness.think_ms / 1e3, size=n)
    entries = None
    if harness.dataset_entries:
        seed = int.from_bytes(hashlib.sha256(f"{row['id']}/dataset".encode()).digest()[:8], "little")
        entries = np.random.default_rng(seed).integers(0, harness.dataset_entries, size=n)

    def blocks(rid: int) -> Optional[tuple[int, ...]]:
        if entries is None:
            return None
        return tuple(int(entries[rid]) << 20 | j for j in range(-(-int(isls[rid]) // DATASET_BLOCK_TOKENS)))

    out = []
    warm_ends = tuple(user * warm + warm - 1 for user in range(conc)) if warm else ()
    for user in range(conc):
        for k in range(warm):
            rid = user * warm + k
            out.append(Request(rid=rid, arrived_at=0.0, input_length=int(isls[rid]),
                               output_length=int(osls[rid]),
                               hash_ids=blocks(rid), hash_block_size=DATASET_BLOCK_TOKENS,
                               session=user, deps=(rid - 1,) if k else ()))
    for user in range(conc):
        start = user / conc * harness.stagger_s
        for k in range(per):
            rid = n_warm + user * per + k
            # after a warm-up, user u's first prompt waits for it, then its stagger
            first_delay = start + float(think[rid]) if warm else 0.0
            out.append(Request(rid=rid, arrived_at=start + (0.0 if k else float(think[rid])),
                               input_length=int(isls[rid]), output_length=int(osls[rid]),
                               hash_ids=blocks(rid), hash_block_size=DATASET_BLOCK_TOKENS,
                               session=user, deps=(rid - 1,) if k else warm_ends,
                               delay_s=float(think[rid]) if k else first_delay))
    return out  # in id order: the warm-up chains, then the scored ones


#: tokens per block of a dataset prompt's ``hash_ids`` (a multiple of simkit's 64-token
#: default ``block_size``, which the rows' pools keep)
DATASET_BLOCK_TOKENS = 64


def frontend_shift_ms(simulated, measured) -> float:
    """The serving frontend's time (ms) that best shifts ``simulated`` TTFTs onto ``measured``
    ones: the weighted median of measured - simulated, weights 1 / measured (it minimises the
    mean |relative error| of the shifted TTFTs), at least 0. calibrate_roofline.fit_frontend
    fits ``dispatch_overhead_ms`` so; silicon_harness_variants.py ``--refit-frontend`` refits it
    per candidate client."""
    sim, meas = np.asarray(simulated, float), np.asarray(measured, float)
    gap = meas - sim
    order = np.argsort(gap)
    cum = np.cumsum((1.0 / meas)[order])
    return max(0.0, float(gap[order][np.searchsorted(cum, cum[-1] / 2)]))


def _scored(records, harness: Harness, conc: int) -> list:
    """The completed requests the client scores: all but the warm-up ones, and all or all but
    each user's first."""
    warm = harness.warmup_per_user * conc
    return [r for r in records.requests if r.status == "completed" and r.rid >= warm
            and (harness.score_first_wave or (r.rid - warm) % harness.prompts_per_user)]


def simulate_row(row, conc: int, overheads: Optional[dict] = None, latency_model: str = "roofline",
                 harness: Optional[Harness] = None) -> tuple[float, float]:
    """Simulated mean TTFT and TPOT (ms) of the scored requests (all, or all but the first
    wave, per the harness); a request's TPOT = (last - first token) / (OSL - 1), the
    definition of aiconfigurator and of ``benchmark_serving.py``.

    Raises:
        ConfigError: the deployment is invalid (e.g. the weights do not fit).
    """
    harness = harness or harness_for(row)
    scenario = scenario_from_dict(scenario_for(row, conc, overheads, latency_model, harness), source=row["id"])
    records = simulate(scenario, client_requests(row, conc, replace(harness, desync=0.0)), record_token_times=False)
    done = _scored(records, harness, conc)
    if harness.desync:  # once more, the users staggered over the lockstep run's cycle
        spread = replace(harness, desync=0.0, stagger_s=harness.desync * float(np.mean([r.e2e_s for r in done])))
        records = simulate(scenario, client_requests(row, conc, spread), record_token_times=False)
        done = _scored(records, spread, conc)
    ttft = np.mean([r.ttft_s for r in done]) * 1e3
    tpots = [(r.last_token_at - r.first_token_at) / (r.output_length - 1) for r in done if r.output_length > 1]
    tpot = np.mean(tpots) * 1e3 if tpots else np.nan
    return float(ttft), float(tpot)


def ttft_band(row, conc: int, overheads: Optional[dict] = None, latency_model: str = "roofline",
              harness: Optional[Harness] = None) -> tuple[float, float]:
    """Mean TTFT (ms) of the scored requests with the users desynchronized and in lockstep:
    ``(desynchronized, lockstep)``. Lockstep: every user starts together (the harness as
    given, without jitter). Desynchronized: user u starts u / C of a cycle late, a cycle being
    the lockstep run's mean E2E, so the users' prefills spread over it."""
    harness = harness or harness_for(row)
    lock = replace(harness, jitter_ms=0.0, think_ms=0.0, stagger_s=0.0, desync=0.0)
    scenario = scenario_from_dict(scenario_for(row, conc, overheads, latency_model, lock), source=row["id"])
    records = simulate(scenario, client_requests(row, conc, lock), record_token_times=False)
    done = _scored(records, lock, conc)
    lockstep = float(np.mean([r.ttft_s for r in done]) * 1e3)
    cycle = float(np.mean([r.e2e_s for r in done]))
    spread = replace(lock, stagger_s=cycle)
    records = simulate(scenario, client_requests(row, conc, spread), record_token_times=False)
    desync = float(np.mean([r.ttft_s for r in _scored(records, spread, conc)]) * 1e3)
    return desync, lockstep
