#!/usr/bin/env python3
"""KV capacity and long-context decode throughput, bf16 / fp8 / int2 (or any KV-cache dtype the engine
offers: turboquant_*, *_per_token_head), in the real engine (H200).

  python3 benchmarks/e2e_throughput.py --model-config dense8b --kv int2 --context 32768 \
      --concurrency 8 --out rows.jsonl

Writes a realistic config.json (no weights: load_format="dummy") for the chosen shape, starts
aphrodite with it at a fixed gpu_memory_utilization, reads the engine-reported KV capacity
("GPU KV cache size: N tokens" / "Maximum concurrency ... : X"), then for each concurrency C runs
C prompts of `context` random token ids twice -- 1 output token (time to first token of the whole
batch: the prefill) and 1 + DECODE output tokens -- and reports
decode tokens/s = C * DECODE / (t_long - t_short). One JSON row per (kv dtype, concurrency); a
dtype that refuses the model or fails to build it gets one row with its `error` (exit status 1).

--kv a,b,c runs each dtype in its own process (the engine is built once per process), one after
another with the same flags, and prints the table of all rows; --concurrency takes `max` (the
dtype's own whole-request maximum at this context) and `bf16max` (that of `auto`, which must come
first); --budget-s skips the dtypes that would start after it:
  python3 benchmarks/e2e_throughput.py --model-config dense8b --kv auto,fp8,int8_per_token_head,int2 \
      --context 32768 --concurrency 1,bf16max,max --out rows.jsonl
"""
import argparse
import json
import logging
import os
import re
import sys
import time

CONFIGS = {
    # Qwen3-8B shapes: 36 layers, 32 q / 8 KV heads, head_dim 128 (GQA 8:1), dense MLP.
    "dense8b": {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096,
        "intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32,
        "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
        "max_position_embeddings": 131072, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
        "hidden_act": "silu", "attention_bias": False, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16", "bos_token_id": 151643, "eos_token_id": 151645,
    },
}

# Qwen3.5-27B-like hybrid (Gated DeltaNet + full attention, 1 attention layer in 4), built on the
# Qwen3_5ForConditionalGeneration config written by make_models.py (--base-config), text part only.
HYBRID_TEXT = {
    "hidden_size": 5120, "intermediate_size": 17408, "num_hidden_layers": 64,
    "num_attention_heads": 24, "num_key_value_heads": 4, "head_dim": 256,
    "linear_num_key_heads": 16, "linear_num_value_heads": 48, "linear_key_head_dim": 128,
    "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
    "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 16,
    "vocab_size": 248320, "max_position_embeddings": 262144,
}


class CapacityLog(logging.Handler):
    """Collects the engine's own capacity lines (printed by the engine core in this process)."""
    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        msg = record.getMessage()
        if any(k in msg for k in ("KV cache size", "Maximum concurrency", "int2 KV cache active",
                                  "attention block size", "mamba page size")):
            self.lines.append(msg)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-config", default="dense8b", choices=sorted(CONFIGS) + ["hybrid27b"])
    ap.add_argument("--base-config", default="/tmp/models/qwen35/config.json",
                    help="hybrid27b: the tiny Qwen3.5 config.json whose text part is scaled up")
    ap.add_argument("--kv", default="int2")
    ap.add_argument("--context", type=int, default=32768)
    ap.add_argument("--concurrency", default="8", help="comma list of request counts, `max`, `bf16max`")
    ap.add_argument("--budget-s", type=float, default=0, help="with several --kv: start no dtype after this (0: none)")
    ap.add_argument("--decode", type=int, default=64)
    ap.add_argument("--gpu-mem", type=float, default=0.5)
    ap.add_argument("--eager", action="store_true")
    ap.add_argument("--mixed", action="store_true",
                    help="prompt lengths spread evenly from context/8 to 15 context/8 (mean context, shuffled; "
                         "decode_attention.ragged_lengths) instead of all `context`")
    ap.add_argument("--repeat-long", action="store_true",
                    help="time the decode run a second time (decode_tok_s_2): the first one may include "
                         "kernel compilations for decode batch sizes that only appear there")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if "," in a.kv:
        return run_each(a)

    path = f"/tmp/cfg-{a.model_config}"
    os.makedirs(path, exist_ok=True)
    if a.model_config == "hybrid27b":
        cfg = json.load(open(a.base_config))
        cfg["text_config"].update(HYBRID_TEXT)
    else:
        cfg = CONFIGS[a.model_config]
    with open(f"{path}/config.json", "w") as f:
        json.dump(cfg, f)

    os.environ.setdefault("APHRODITE_ENABLE_V1_MULTIPROCESSING", "0")   # engine logs in this process
    from aphrodite import LLM, SamplingParams
    from aphrodite.inputs import TokensPrompt
    handler = CapacityLog()
    logging.getLogger("aphrodite").addHandler(handler)

    kw = dict(model=path, load_format="dummy", skip_tokenizer_init=True, dtype="bfloat16",
              max_model_len=a.context + a.decode + 16, gpu_memory_utilization=a.gpu_mem,
              enforce_eager=a.eager, seed=0, kv_cache_dtype=a.kv, enable_prefix_caching=False,
              max_num_seqs=256)
    sys.path.insert(0, __file__.rsplit("/benchmarks/", 1)[0])
    from aphrodite_int2kv.quality.engine_eval import baseline_backend
    kw.update(baseline_backend(a.kv))     # Triton for bf16 / fp8; the engine's pick for turboquant
    if a.model_config == "hybrid27b":
        kw.update(language_model_only=True, gdn_prefill_backend="triton")
    t0 = time.perf_counter()
    try:
        llm = LLM(**kw)
    except Exception as exc:    # a dtype that refuses the model, or crashes building it: its result
        row = dict(model=a.model_config, kv_cache_dtype=a.kv, context_len=a.context, gpu_memory_utilization=a.gpu_mem,
                   cuda_graphs=not a.eager, error=f"{type(exc).__name__}: {str(exc)[:400]}")
        print("ROW " + json.dumps(row), flush=True)
        with open(a.out, "a") as f:
            f.write(json.dumps(row) + "\n")
        return 1
    init_s = time.perf_counter() - t0
    cap_lines = list(handler.lines)
    kv_tokens = max_conc = None
    for line in cap_lines:
        m = re.search(r"KV cache size: ([\d,]+) tokens", line)
        if m:
            kv_tokens = int(m.group(1).replace(",", ""))
        m = re.search(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x", line)
        if m:
            max_conc = float(m.group(2))
    print(f"[{a.kv}] init {init_s:.0f} s; kv_tokens={kv_tokens} max_concurrency={max_conc}", flush=True)
    for line in cap_lines:
        print("   engine:", line[:300], flush=True)

    import torch
    from benchmarks.decode_attention import ragged_lengths
    g = torch.Generator().manual_seed(0)
    # warm-up: Triton compiles the prefill/decode kernels at first use; keep that out of the timing
    t = time.perf_counter()
    llm.generate([TokensPrompt(prompt_token_ids=torch.randint(1000, 100000, (9000,), generator=g).tolist())] * 2,
                 SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True, detokenize=False), use_tqdm=False)
    print(f"[{a.kv}] warm-up {time.perf_counter() - t:.1f} s", flush=True)
    rows = []
    for C in concurrencies(a.concurrency, max_conc):
        lens = ragged_lengths(a.context, C) if a.mixed else [a.context] * C
        prompts = [TokensPrompt(prompt_token_ids=torch.randint(1000, 100000, (n,), generator=g).tolist())
                   for n in lens]
        short = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True, detokenize=False)
        long = SamplingParams(temperature=0.0, max_tokens=1 + a.decode, ignore_eos=True, detokenize=False)
        fits = kv_tokens is None or C * (a.context + a.decode) <= kv_tokens
        row = dict(model=a.model_config, kv_cache_dtype=a.kv, context_len=a.context, concurrency=C,
                   decode_tokens=a.decode, gpu_memory_utilization=a.gpu_mem, kv_tokens=kv_tokens,
                   max_concurrency=max_conc, cuda_graphs=not a.eager, fits_in_kv=fits,
                   **(dict(mixed=True, prompt_lens=lens) if a.mixed else {}))
        try:
            t = time.perf_counter()
            llm.generate(prompts, short, use_tqdm=False)
            t_short = time.perf_counter() - t
            t = time.perf_counter()
            outs = llm.generate(prompts, long, use_tqdm=False)
            t_long = time.perf_counter() - t
            n_out = sum(len(o.outputs[0].token_ids) for o in outs)
            assert n_out == C * (1 + a.decode), n_out
            assert t_long > t_short, f"decode run ({t_long:.2f} s) not longer than prefill run ({t_short:.2f} s)"
            row.update(batch_ttft_s=round(t_short, 2), total_s=round(t_long, 2),
                       decode_tok_s=round(C * a.decode / max(1e-9, t_long - t_short), 1))
            if a.repeat_long:
                t = time.perf_counter()
                llm.generate(prompts, long, use_tqdm=False)
                t_long2 = time.perf_counter() - t
                row.update(total_s_2=round(t_long2, 2),
                           decode_tok_s_2=round(C * a.decode / max(1e-9, t_long2 - t_short), 1))
        except Exception as exc:   # e.g. more concurrency than the cache holds: recorded, not hidden
            row.update(error=f"{type(exc).__name__}: {str(exc)[:300]}")
        print("ROW " + json.dumps(row), flush=True)
        rows.append(row)
    if not rows:   # capacity only
        rows.append(dict(model=a.model_config, kv_cache_dtype=a.kv, context_len=a.context,
                         gpu_memory_utilization=a.gpu_mem, kv_tokens=kv_tokens, max_concurrency=max_conc,
                         cuda_graphs=not a.eager, engine_lines=cap_lines))
        print("ROW " + json.dumps(rows[-1])[:600], flush=True)
    with open(a.out, "a") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def concurrencies(spec: str, max_conc) -> list[int]:
    """--concurrency's list: counts, `max` = the whole requests this dtype's cache holds."""
    out = []
    for c in (c.strip() for c in spec.split(",") if c.strip()):
        if c == "max":
            if max_conc is None:
                raise SystemExit("--concurrency max: the engine reported no maximum concurrency")
            out.append(max(1, int(max_conc)))
        elif c == "bf16max":
            raise SystemExit("--concurrency bf16max needs --kv auto,... (bf16's maximum comes from its own run)")
        else:
            out.append(int(c))
    return list(dict.fromkeys(out))


def run_each(a) -> int:
    """Each --kv dtype in its own process, the same flags; `bf16max` from auto's row."""
    import subprocess

    kvs = [k.strip() for k in a.kv.split(",") if k.strip()]
    if "bf16max" in a.concurrency and kvs[0] != "auto":
        raise SystemExit("--concurrency bf16max: put auto first in --kv (its maximum is measured by its own run)")
    argv = sys.argv[1:]
    base = [x for i, x in enumerate(argv) if x not in ("--kv", "--concurrency", "--budget-s")
            and (i == 0 or argv[i - 1] not in ("--kv", "--concurrency", "--budget-s"))]
    t0, rc, bf16max = time.time(), 0, None
    for kv in kvs:
        if a.budget_s and time.time() - t0 > a.budget_s:
            row = dict(model=a.model_config, kv_cache_dtype=kv, context_len=a.context,
                       error=f"not run: --budget-s {a.budget_s:.0f} passed")
            with open(a.out, "a") as f:
                f.write(json.dumps(row) + "\n")
            continue
        conc = a.concurrency
        if "bf16max" in conc:
            conc = conc.replace("bf16max", str(bf16max) if bf16max else "")
        print(f"=== {kv} (concurrency {conc}) at {time.time() - t0:.0f} s", flush=True)
        before = len(read_rows(a.out))
        child = subprocess.run([sys.executable, __file__, *base, "--kv", kv, "--concurrency", conc]).returncode
        rc |= child
        rows = read_rows(a.out)
        if len(rows) == before:     # it died before writing its row: that is its result
            with open(a.out, "a") as f:
                f.write(json.dumps(dict(model=a.model_config, kv_cache_dtype=kv, context_len=a.context,
                                        error=f"the process exited with status {child} and wrote no row")) + "\n")
        if kv == "auto":
            mc = next((r.get("max_concurrency") for r in reversed(rows[before:]) if r.get("max_concurrency")), None)
            bf16max = max(1, int(mc)) if mc else None
    print_table(read_rows(a.out)[-1000:], set(kvs), a.context)
    return rc


def read_rows(path) -> list[dict]:
    return [json.loads(line) for line in open(path)] if os.path.exists(path) else []


def print_table(rows, kvs, context):
    print("| kv | KV tokens | max concurrency | concurrency | batch TTFT s | decode tok/s | error |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        if r.get("kv_cache_dtype") in kvs and r.get("context_len") == context:
            print(f"| {r['kv_cache_dtype']} | {r.get('kv_tokens')} | {r.get('max_concurrency')} | "
                  f"{r.get('concurrency')} | {r.get('batch_ttft_s')} | {r.get('decode_tok_s')} | "
                  f"{(r.get('error') or '')[:120]} |")


if __name__ == "__main__":
    sys.exit(main())
