#!/usr/bin/env python3
"""The user's scenario of PRs #1711/#1712 on the real engine (H200, aphrodite 0.21.0):
a tiny Qwen3.5 hybrid whose Gated DeltaNet `in_proj_qkv` projections are EXL3-quantized, a small
random PEFT LoRA adapter, `LLM(..., enable_lora=True)` and a generation with that LoRA request.

  python3 benchmarks/exl3_lora_scenario.py BASE_MODEL_DIR WORKDIR

BASE_MODEL_DIR: a tiny random-weight Qwen3.5 hybrid checkpoint (Qwen3_5ForConditionalGeneration). The script writes an EXL3
variant (random trellis bits are a valid EXL3 encoding of *some* weights; suh/svh are sign
vectors as exllamav3 stores them; quantization_config with tensor_storage as the engine's EXL3
loader reads it) and an adapter, then runs three child processes:

  no-plugin   APHRODITE_PLUGINS=none            -> expect "Missing EXL3 tensors ... in_proj_qkv"
  only-1711   plugin off, #1711 patch applied by hand (engine in-process)
                                                -> expect "Unsupported base layer: MergedColumnParallelLinear"
  plugin      the installed plugin (entry point, every process)
                                                -> expect generated text with the LoRA request
Prints one SCENARIO_RESULT line per child and exits non-zero unless all three behave as expected.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

EXPECT = {
    "no-plugin": "Missing EXL3 tensors for",
    "only-1711": "Unsupported base layer: MergedColumnParallelLinear",
    "plugin": "GENERATED",
}


def make_exl3_model(base: str, out: str) -> list[str]:
    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(base, out, dirs_exist_ok=True)
    files = [f for f in os.listdir(out) if f.endswith(".safetensors")]
    storage, g = {}, torch.Generator().manual_seed(0)
    for f in files:
        sd = load_file(os.path.join(out, f))
        for name in [n for n in sd if n.endswith("linear_attn.in_proj_qkv.weight")]:
            w = sd.pop(name)
            prefix = name[: -len(".weight")]
            out_f, in_f = w.shape
            bits = 4
            sd[prefix + ".trellis"] = torch.randint(-2 ** 15, 2 ** 15, (in_f // 16, out_f // 16, 16 * bits),
                                                    dtype=torch.int16, generator=g)
            sd[prefix + ".suh"] = (torch.randint(0, 2, (in_f,), generator=g) * 2 - 1).half()
            sd[prefix + ".svh"] = ((torch.randint(0, 2, (out_f,), generator=g) * 2 - 1) * 0.01).half()
            storage[prefix] = {"quant_format": "exl3", "bits": bits}
        save_file(sd, os.path.join(out, f))
    cfg_path = os.path.join(out, "config.json")
    cfg = json.load(open(cfg_path))
    cfg["quantization_config"] = {"quant_method": "exl3", "bits": 4.0, "tensor_storage": storage}
    json.dump(cfg, open(cfg_path, "w"), indent=1)
    return sorted(storage)


def make_adapter(model_dir: str, out: str) -> None:
    import torch
    from safetensors.torch import save_file

    cfg = json.load(open(os.path.join(model_dir, "config.json")))["text_config"]
    layers = [i for i, t in enumerate(cfg["layer_types"]) if t == "full_attention"]
    r, hidden = 8, cfg["hidden_size"]
    inner = cfg["num_attention_heads"] * cfg["head_dim"]
    g = torch.Generator().manual_seed(1)
    sd = {}
    for i in layers:
        p = f"base_model.model.model.language_model.layers.{i}.self_attn.o_proj"
        sd[p + ".lora_A.weight"] = torch.randn(r, inner, generator=g) * 0.01
        sd[p + ".lora_B.weight"] = torch.randn(hidden, r, generator=g) * 0.01
    os.makedirs(out, exist_ok=True)
    save_file(sd, os.path.join(out, "adapter_model.safetensors"))
    json.dump({"peft_type": "LORA", "r": r, "lora_alpha": 16, "lora_dropout": 0.0, "bias": "none",
               "target_modules": ["o_proj"], "task_type": "CAUSAL_LM",
               "base_model_name_or_path": model_dir}, open(os.path.join(out, "adapter_config.json"), "w"))


def child(mode: str, model: str, adapter: str) -> None:
    if mode == "only-1711":
        from aphrodite_int2kv.patches import exl3_shard_ids

        print("manual patch:", exl3_shard_ids.apply(), flush=True)
    from aphrodite import LLM, SamplingParams
    from aphrodite.lora.request import LoRARequest

    llm = LLM(model=model, tokenizer=model, dtype="bfloat16", max_model_len=512, gpu_memory_utilization=0.3,
              enforce_eager=True, seed=0, attention_config={"backend": "TRITON_ATTN"},
              gdn_prefill_backend="triton", language_model_only=True,
              enable_lora=True, max_lora_rank=8, max_loras=1)
    outs = llm.generate(["The Zen of Python says", "Errors should never pass"],
                        SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True),
                        lora_request=LoRARequest("tiny", 1, adapter), use_tqdm=False)
    for o in outs:
        print("GENERATED", repr(o.prompt), "->", len(o.outputs[0].token_ids), "tokens", repr(o.outputs[0].text[:50]),
              flush=True)


def main():
    if len(sys.argv) < 3 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0 if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help") else 2)
    if sys.argv[1] == "--child":
        child(*sys.argv[2:5])
        return
    base, work = sys.argv[1], sys.argv[2]
    model, adapter = os.path.join(work, "qwen35-exl3"), os.path.join(work, "lora")
    prefixes = make_exl3_model(base, model)
    make_adapter(model, adapter)
    print(f"EXL3 layers: {prefixes}", flush=True)
    ok = True
    for mode in ("no-plugin", "only-1711", "plugin"):
        env = dict(os.environ)
        if mode != "plugin":
            env["APHRODITE_PLUGINS"] = "none"            # aphrodite loads no general plugin
        if mode == "only-1711":
            env["APHRODITE_ENABLE_V1_MULTIPROCESSING"] = "0"   # engine core + worker in this process
        res = subprocess.run([sys.executable, __file__, "--child", mode, model, adapter], env=env,
                             capture_output=True, text=True, timeout=400)
        text = res.stdout + res.stderr
        hit = EXPECT[mode] in text
        ok &= hit and (res.returncode == 0) == (mode == "plugin")
        lines = [l for l in text.splitlines() if any(k in l for k in ("Error", "GENERATED", "aphrodite-int2kv", "manual patch"))]
        print(f"----- {mode}: exit {res.returncode}, expected marker {'found' if hit else 'MISSING'}")
        print("\n".join(lines[-12:]))
        print("SCENARIO_RESULT " + json.dumps({"mode": mode, "exit": res.returncode, "expected": EXPECT[mode],
                                               "found": hit}), flush=True)
        with open(os.path.join(os.environ.get("OUT", work), f"exl3_lora_{mode}.log"), "w") as f:
            f.write(text)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
