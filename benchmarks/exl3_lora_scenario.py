"""The user's scenario of PRs #1711/#1712 on the real engine (GPU, aphrodite 0.21.0): a tiny
Qwen3.5 hybrid whose Gated DeltaNet `in_proj_qkv` projections are EXL3-quantized, a small random
PEFT LoRA adapter, `LLM(..., enable_lora=True)` and a generation with that LoRA request -- and the
same with `--kv-cache-dtype int2` and CUDA graphs, the configuration this plugin exists for.

  python3 benchmarks/exl3_lora_scenario.py WORKDIR [--modes no-plugin,only-1711,plugin,bf16-graphs,int2-graphs]

The script writes a tiny random-weight Qwen3.5 hybrid (Qwen3_5ForConditionalGeneration, text only
is used; its lm_head scaled so that greedy choices are decided by clear margins), an EXL3 variant
(random trellis bits are a valid EXL3 encoding of *some* weights; suh/svh are sign vectors as
exllamav3 stores them; quantization_config with tensor_storage as the engine's EXL3 loader reads
it) and an adapter, then runs one child process per mode (prompts are token ids, no tokenizer):

  no-plugin    APHRODITE_PLUGINS=none            -> expect "Missing EXL3 tensors ... in_proj_qkv"
  only-1711    plugin off, #1711 patch applied by hand (engine in-process)
                                                 -> expect "Unsupported base layer: MergedColumnParallelLinear"
  plugin       the installed plugin, eager, bf16 KV   -> expect a generation with the LoRA request
  bf16-graphs  the plugin, CUDA graphs, bf16 KV       -> a generation (the reference of int2-graphs)
  int2-graphs  the plugin, CUDA graphs, int2 KV       -> a generation, "int2 KV cache active", and
               the first greedy tokens equal bf16-graphs' up to bf16's first close call (top-1
               minus top-2 log-prob < 1 nat; random weights give few wide margins)
Prints one SCENARIO_RESULT line per mode (and the comparison) and exits non-zero unless every mode
behaves as expected. Logs go to $OUT (or WORKDIR).
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
    "bf16-graphs": "GENERATED",
    "int2-graphs": "int2 KV cache active",
}
MODES = list(EXPECT)
PROMPTS = [[17, 230, 45, 901, 12, 77, 310, 5] * 8, [400, 3, 99, 123, 640, 18, 250] * 20]
CLOSE_CALL = 1.0


def make_base(out: str) -> None:
    """A tiny random-weight Qwen3.5 hybrid: 8 layers, 3 Gated DeltaNet : 1 full attention, head_dim 256."""
    import torch
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    torch.manual_seed(0)
    text = dict(vocab_size=1024, hidden_size=256, intermediate_size=512, num_hidden_layers=8,
                num_attention_heads=4, num_key_value_heads=2, head_dim=256, linear_conv_kernel_dim=4,
                linear_key_head_dim=128, linear_value_head_dim=128, linear_num_key_heads=2,
                linear_num_value_heads=4, layer_types=(["linear_attention"] * 3 + ["full_attention"]) * 2,
                rms_norm_eps=1e-6, max_position_embeddings=8192, tie_word_embeddings=False,
                eos_token_id=1, pad_token_id=1, bos_token_id=None,
                rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
                                 "mrope_section": [11, 11, 10], "mrope_interleaved": True})
    cfg = Qwen3_5Config(text_config=text, tie_word_embeddings=False, image_token_id=1000, video_token_id=1001,
                        vision_start_token_id=1002, vision_end_token_id=1003,
                        vision_config=dict(depth=1, hidden_size=64, intermediate_size=128, num_heads=2,
                                           out_hidden_size=256, patch_size=16, spatial_merge_size=2,
                                           temporal_patch_size=2, num_position_embeddings=2304, in_channels=3))
    model = Qwen3_5ForConditionalGeneration(cfg).to(torch.bfloat16)
    for name, p in model.named_parameters():
        if name.endswith("A_log"):
            p.data.uniform_(0.0, 1.0)          # a stable Gated DeltaNet recurrence
        elif name.endswith("dt_bias"):
            p.data.fill_(0.5)
    model.lm_head.weight.data.mul_(30.0)       # peaked logits: greedy choices with clear margins
    model.save_pretrained(out, safe_serialization=True)


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
    from aphrodite.inputs import TokensPrompt
    from aphrodite.lora.request import LoRARequest

    graphs = mode.endswith("-graphs")
    kw = dict(attention_config={"backend": "TRITON_ATTN"})
    if mode == "int2-graphs":
        kw = dict(kv_cache_dtype="int2")
    llm = LLM(model=model, skip_tokenizer_init=True, dtype="bfloat16", max_model_len=512,
              gpu_memory_utilization=0.3, kv_cache_memory_bytes=2 << 30, enforce_eager=not graphs, seed=0,
              gdn_prefill_backend="triton",
              language_model_only=True, enable_lora=True, max_lora_rank=8, max_loras=1, **kw)
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in PROMPTS],
                        SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True, logprobs=2, detokenize=False),
                        lora_request=LoRARequest("tiny", 1, adapter), use_tqdm=False)
    rows = []
    for o in outs:
        c = o.outputs[0]
        margins = [lps[t].logprob - max([v.logprob for u, v in lps.items() if u != t] or [99.0])
                   for t, lps in zip(c.token_ids, c.logprobs)]
        rows.append(dict(ids=list(c.token_ids), margins=[round(m, 3) for m in margins]))
        print("GENERATED", len(c.token_ids), "tokens", list(c.token_ids), flush=True)
    print("TOKENS " + json.dumps(rows), flush=True)


def compare(ref: list[dict], other: list[dict]) -> dict:
    """Tokens compared (before each prompt's first close call in `ref`) and whether they agree."""
    compared, equal = 0, True
    for r, o in zip(ref, other):
        n = next((i for i, m in enumerate(r["margins"]) if m < CLOSE_CALL), len(r["ids"]))
        compared += n
        equal &= o["ids"][:n] == r["ids"][:n]
    return dict(compared=compared, equal=equal)


def main():
    import argparse

    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(*sys.argv[2:5])
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workdir")
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated, of " + ", ".join(MODES))
    args = ap.parse_args()
    modes = args.modes.split(",")
    if unknown := [m for m in modes if m not in EXPECT]:
        raise SystemExit(f"--modes: unknown {unknown}; use some of {', '.join(MODES)}")
    if "int2-graphs" in modes and "bf16-graphs" not in modes:
        raise SystemExit("--modes: int2-graphs is compared with bf16-graphs: run both")
    base, model, adapter = (os.path.join(args.workdir, d) for d in ("qwen35", "qwen35-exl3", "lora"))
    make_base(base)
    prefixes = make_exl3_model(base, model)
    make_adapter(model, adapter)
    print(f"EXL3 layers: {prefixes}", flush=True)
    ok, tokens = True, {}
    for mode in modes:
        env = dict(os.environ)
        if mode in ("no-plugin", "only-1711"):
            env["APHRODITE_PLUGINS"] = "none"            # aphrodite loads no general plugin
        if mode == "only-1711":
            env["APHRODITE_ENABLE_V1_MULTIPROCESSING"] = "0"   # engine core + worker in this process
        res = subprocess.run([sys.executable, __file__, "--child", mode, model, adapter], env=env,
                             capture_output=True, text=True, timeout=500)
        text = res.stdout + res.stderr
        hit = EXPECT[mode] in text and (mode in ("no-plugin", "only-1711") or "GENERATED" in text)
        ok &= hit and (res.returncode == 0) == (mode not in ("no-plugin", "only-1711"))
        found = [line for line in text.splitlines() if line.startswith("TOKENS ")]
        if found:
            tokens[mode] = json.loads(found[-1][len("TOKENS "):])
        lines = [line for line in text.splitlines() if any(k in line for k in (
            "Error", "GENERATED", "aphrodite-int2kv", "manual patch", "int2 KV cache active", "CUDA graph"))]
        print(f"----- {mode}: exit {res.returncode}, expected marker {'found' if hit else 'MISSING'}")
        print("\n".join(lines[-12:]))
        print("SCENARIO_RESULT " + json.dumps({"mode": mode, "exit": res.returncode, "expected": EXPECT[mode],
                                               "found": hit}), flush=True)
        with open(os.path.join(os.environ.get("OUT", args.workdir), f"exl3_lora_{mode}.log"), "w") as f:
            f.write(text)
    if "int2-graphs" in modes:
        cmp = compare(tokens.get("bf16-graphs", []), tokens.get("int2-graphs", []))
        ok &= bool(tokens.get("bf16-graphs")) and bool(tokens.get("int2-graphs")) and cmp["equal"] and cmp["compared"] > 0
        print("SCENARIO_RESULT " + json.dumps({"compare": "int2-graphs vs bf16-graphs", **cmp,
                                               "close_call": CLOSE_CALL, "tokens": tokens}), flush=True)
    print("SCENARIO:", "OK" if ok else "FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
