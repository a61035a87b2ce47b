"""Regenerate simkit/engine/data/gpus.json and simkit/engine/data/models/*.json from an
aiconfigurator-core wheel.

    pip download aiconfigurator-core --no-deps -d /tmp/aic
    python benchmarks/import_aic_specs.py /tmp/aic/aiconfigurator_core-*.whl

GPU figures are copied from the wheel's ``systems/<gpu>.yaml`` (Apache-2.0, NVIDIA), dense
tensor-core TFLOPS; model configs are copied byte for byte from ``model_configs/``. Fields
gpus.json has that the wheel does not (``host_memory_gib`` and its ``host_memory_source``,
from NVIDIA's system datasheets, see simkit/engine/data/NOTICE.md) are kept as they are.
"""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

import yaml

OUT = Path(__file__).resolve().parent.parent / "simkit" / "engine" / "data"
GPUS = {"A100": "a100_sxm", "H100": "h100_sxm", "H200": "h200_sxm", "B200": "b200_sxm",
        "GB200": "gb200", "B300": "b300_sxm", "GB300": "gb300", "L40S": "l40s"}
MODELS = {"Llama-3.1-8B": "meta-llama--Meta-Llama-3.1-8B", "Llama-3.1-70B": "meta-llama--Meta-Llama-3.1-70B",
          "Qwen3-32B": "Qwen--Qwen3-32B", "Qwen3-235B-A22B": "Qwen--Qwen3-235B-A22B",
          "gpt-oss-120b": "openai--gpt-oss-120b", "DeepSeek-V3": "deepseek-ai--DeepSeek-V3"}


def main(wheel: str) -> None:
    zf = zipfile.ZipFile(wheel)
    version = Path(wheel).name.split("-")[1]
    before = json.loads((OUT / "gpus.json").read_text()) if (OUT / "gpus.json").is_file() else {}
    gpus = {}
    for name, stem in GPUS.items():
        spec = yaml.safe_load(zf.read(f"aiconfigurator_core/systems/{stem}.yaml"))
        gpu, node = spec["gpu"], spec["node"]
        tflops = {"bf16": gpu["bfloat16_tc_flops"] / 1e12}
        for key, prec in (("fp8_tc_flops", "fp8"), ("fp4_tc_flops", "fp4")):
            if key in gpu:
                tflops[prec] = gpu[key] / 1e12
        gpus[name] = {
            "memory_bytes": gpu["mem_capacity"],
            "hbm_gb_per_s": gpu["mem_bw"] / 1e9,
            "dense_tflops": tflops,
            "gpus_per_node": node["num_gpus_per_node"],
            "intra_node_gb_per_s": node["intra_node_bw"] / 1e9,
            "inter_node_gb_per_s": node["inter_node_bw"] / 1e9,
            "p2p_latency_us": node["p2p_latency"] * 1e6,
            "aic_system": stem,
            "source": f"aiconfigurator-core {version} systems/{stem}.yaml (Apache-2.0)",
        }
        kept = {k: v for k, v in before.get(name, {}).items() if k.startswith("host_memory")}
        gpus[name].update(kept)
    (OUT / "gpus.json").write_text(json.dumps(gpus, indent=1) + "\n")
    for name, stem in MODELS.items():
        (OUT / "models" / f"{name}.json").write_bytes(zf.read(f"aiconfigurator_core/model_configs/{stem}_config.json"))


if __name__ == "__main__":
    main(sys.argv[1])
