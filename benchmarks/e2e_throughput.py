#!/usr/bin/env python3
"""KV capacity, time to first token and long-context decode throughput of any KV-cache dtype the
engine offers (auto, fp8, *_per_token_head, nvfp4, turboquant_*, int2), in the real engine (H200).

  python3 benchmarks/e2e_throughput.py --model-config dense8b --kv int2 --context 32768 \
      --concurrency 8 --out rows.jsonl

Writes a realistic config.json (no weights: load_format="dummy") for the chosen shape, starts
aphrodite with it (KV memory from --gpu-mem, or exactly --kv-gib), reads the engine-reported KV
capacity ("GPU KV cache size: N tokens" / "Maximum concurrency ... : X"), then for each
concurrency C submits C prompts of `context` random token ids at once and steps the engine,
timing every step (one prefill per C):
  - ttft_s: the time to each request's first token (first / last), batch_ttft_s: the last one;
  - decode_tok_s: tokens per second between the step where every request has its first token and
    the step where the first one finishes -- steps in which all C requests decode and none
    prefills (max_tokens leaves --decode such steps after the prefill's own).
One JSON row per (kv dtype, concurrency); a dtype that refuses the model or fails to build it gets
one row with its `error` (exit status 1).

--kv a,b,c runs each dtype in its own process (the engine is built once per process) with the same
flags and prints the table of all rows. --concurrency takes `max` (the dtype's own whole-request
maximum at this context) and `bf16max` (that of `auto`, which must come first). --parallel N builds
N dtypes' engines at once (give them --kv-gib and a --gpu-mem that N processes fit in) and lets them
measure one at a time, after all N are built, so no engine's start-up shares the GPU with another's
timing. --budget-s skips the dtypes that would start after it:
  python3 benchmarks/e2e_throughput.py --model-config dense8b --kv auto,fp8,int8_per_token_head,int2 \
      --context 32768 --concurrency 1,bf16max,max --kv-gib 12 --gpu-mem 0.2 --parallel 3 --out rows.jsonl
"""
import argparse
import contextlib
import fcntl
import json
import math
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

# The decode batch sizes the engine captures in CUDA graphs: the engine's own default sizes up to
# 128 (it pads a batch up to the next one), fewer than its default 51, so that start-up is shorter.
CAPTURE_SIZES = [1, 2, 4] + list(range(8, 129, 8))


CAPACITY_LINES = ("KV cache size", "Maximum concurrency", "int2 KV cache active", "attention block size",
                  "mamba page size")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-config", default="dense8b", choices=sorted(CONFIGS) + ["hybrid27b"])
    ap.add_argument("--base-config", default="/tmp/models/qwen35/config.json",
                    help="hybrid27b: the tiny Qwen3.5 config.json whose text part is scaled up")
    ap.add_argument("--kv", default="int2")
    ap.add_argument("--context", type=int, default=32768)
    ap.add_argument("--concurrency", default="8", help="comma list of request counts, `max`, `bf16max`")
    ap.add_argument("--budget-s", type=float, default=0, help="with several --kv: start no dtype after this (0: none)")
    ap.add_argument("--parallel", type=int, default=1, help="with several --kv: build this many engines at once")
    ap.add_argument("--decode", type=int, default=64, help="decode steps timed after the prefill")
    ap.add_argument("--gpu-mem", type=float, default=0.5)
    ap.add_argument("--kv-gib", type=float, default=0,
                    help="KV-cache memory of every dtype, exactly (the engine's kv_cache_memory_bytes; 0: from --gpu-mem)")
    ap.add_argument("--eager", action="store_true")
    ap.add_argument("--mixed", action="store_true",
                    help="prompt lengths spread evenly from context/8 to 15 context/8 (mean context, shuffled; "
                         "decode_attention.ragged_lengths) instead of all `context`")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if "," in a.kv:
        return run_each(a)
    group = Group.from_env()
    try:
        return measure(a, group)
    finally:
        group.built()       # also when building failed: the others stop waiting for this one


def measure(a, group) -> int:
    path = f"/tmp/cfg-{a.model_config}"
    os.makedirs(path, exist_ok=True)
    if a.model_config == "hybrid27b":
        cfg = json.load(open(a.base_config))
        cfg["text_config"].update(HYBRID_TEXT)
    else:
        cfg = CONFIGS[a.model_config]
    with open(f"{path}/config.json", "w") as f:
        json.dump(cfg, f)

    fa_note = keep_turboquant_off_missing_flash_attn() if a.kv.startswith("turboquant_") else None
    from aphrodite import LLM, SamplingParams
    from aphrodite.inputs import TokensPrompt

    kw = dict(model=path, load_format="dummy", skip_tokenizer_init=True, dtype="bfloat16",
              max_model_len=a.context + a.decode + 16, gpu_memory_utilization=a.gpu_mem,
              enforce_eager=a.eager, seed=0, kv_cache_dtype=a.kv, enable_prefix_caching=False,
              max_num_seqs=128, compilation_config={"cudagraph_capture_sizes": CAPTURE_SIZES})
    if a.kv_gib:
        kw["kv_cache_memory_bytes"] = int(a.kv_gib * (1 << 30))
    sys.path.insert(0, __file__.rsplit("/benchmarks/", 1)[0])
    from aphrodite_int2kv.quality.engine_eval import baseline_backend
    kw.update(baseline_backend(a.kv))     # Triton for bf16 / fp8; the engine's pick for the others
    if a.model_config == "hybrid27b":
        kw.update(language_model_only=True, gdn_prefill_backend="triton")
    base_row = dict(model=a.model_config, kv_cache_dtype=a.kv, context_len=a.context, gpu_memory_utilization=a.gpu_mem,
                    **(dict(kv_gib=a.kv_gib) if a.kv_gib else {}), cuda_graphs=not a.eager,
                    **(dict(note=fa_note) if fa_note else {}))
    # The engine core runs in its own process, as under `aphrodite run` (its scheduling overlaps the
    # GPU's work); its log, where the capacity lines are, goes to a file beside --out.
    log_path = os.path.join(os.path.dirname(os.path.abspath(a.out)), f"e2e-engine-{a.model_config}-{a.kv}.log")
    t0 = time.perf_counter()
    try:
        with output_to(log_path):
            llm = LLM(**kw)
    except Exception as exc:    # a dtype that refuses the model, or crashes building it: its result
        row = dict(base_row, error=f"{type(exc).__name__}: {str(exc)[:400]}")
        print("ROW " + json.dumps(row), flush=True)
        print(f"[{a.kv}] the engine's log ({log_path}) ends:\n" + "".join(open(log_path).readlines()[-30:]), flush=True)
        with open(a.out, "a") as f:
            f.write(json.dumps(row) + "\n")
        return 1
    init_s = time.perf_counter() - t0
    cap_lines = [line.strip() for line in open(log_path, errors="replace") if any(k in line for k in CAPACITY_LINES)]
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
    group.built()
    group.wait_all_built()

    import torch
    from benchmarks.decode_attention import ragged_lengths
    engine = llm.llm_engine
    mnbt = llm.llm_engine.aphrodite_config.scheduler_config.max_num_batched_tokens
    g = torch.Generator().manual_seed(0)
    rows = []
    with group.gpu_turn():
        # warm-up: Triton compiles the prefill/decode kernels at first use; keep that out of the timing
        t = time.perf_counter()
        llm.generate([TokensPrompt(prompt_token_ids=torch.randint(1000, 100000, (9000,), generator=g).tolist())] * 2,
                     SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True, detokenize=False), use_tqdm=False)
        print(f"[{a.kv}] warm-up {time.perf_counter() - t:.1f} s", flush=True)
        for C in concurrencies(a.concurrency, max_conc):
            lens = ragged_lengths(a.context, C) if a.mixed else [a.context] * C
            # tokens the first-prefilled request makes while the others prefill, then --decode more
            max_tokens = 1 + a.decode + math.ceil(sum(lens) / mnbt) + 2
            fits = kv_tokens is None or sum(n + max_tokens for n in lens) <= kv_tokens
            row = dict(base_row, concurrency=C, decode_tokens=a.decode, kv_tokens=kv_tokens, max_concurrency=max_conc,
                       fits_in_kv=fits, max_num_batched_tokens=mnbt,
                       **(dict(mixed=True, prompt_lens=lens) if a.mixed else {}))
            try:
                prompts = [TokensPrompt(prompt_token_ids=torch.randint(1000, 100000, (n,), generator=g).tolist())
                           for n in lens]
                params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True, detokenize=False)
                row.update(timings(trace_batch(engine, prompts, params, tag=f"{a.kv}-{C}"), sum(lens)))
            except Exception as exc:   # e.g. more concurrency than the cache holds: recorded, not hidden
                row.update(error=f"{type(exc).__name__}: {str(exc)[:300]}")
            print("ROW " + json.dumps(row), flush=True)
            rows.append(row)
            with open(a.out, "a") as f:      # row by row: a run cut short keeps what it measured
                f.write(json.dumps(row) + "\n")
    if not rows:   # capacity only
        row = dict(base_row, kv_tokens=kv_tokens, max_concurrency=max_conc, engine_lines=cap_lines)
        print("ROW " + json.dumps(row)[:600], flush=True)
        with open(a.out, "a") as f:
            f.write(json.dumps(row) + "\n")
    return 0


def keep_turboquant_off_missing_flash_attn() -> str | None:
    """Where FlashAttention's ops are missing (an install without the FA2/FA3 extensions, like the
    GPU bundle's): let the TurboQuant backend and its bf16 boundary layers run without them instead
    of crashing at the first prefill.
    - the boundary layers (kv_cache_dtype_skip_layers, the model dtype) would pick FLASH_ATTN, first
      in the CUDA priority list, whose validity check does not look at the ops: it is dropped from
      that list, so they take TRITON_ATTN like the bf16 baseline;
    - the TurboQuant backend's prefill calls flash_attn_varlen_func: it gets sdpa_varlen, the same
      attention from torch's SDPA kernels (its own fallback without FA builds the whole score
      matrix: 32 GiB for one 32K prompt, out of memory).
    Both are in-process changes, so the engine core runs in this process
    (APHRODITE_ENABLE_V1_MULTIPROCESSING=0). Returns the row's note, or None where FA is whole."""
    import torch
    try:
        import aphrodite.vllm_flash_attn  # noqa: F401  (loads the FA extensions that are present)
    except ImportError:
        pass
    if hasattr(torch.ops._vllm_fa2_C, "varlen_fwd") or hasattr(torch.ops._vllm_fa3_C, "fwd"):
        return None
    os.environ["APHRODITE_ENABLE_V1_MULTIPROCESSING"] = "0"
    import aphrodite.platforms.cuda as cuda_platform
    import aphrodite.v1.attention.backends.turboquant_attn as tq
    from aphrodite.v1.attention.backends.registry import AttentionBackendEnum

    cuda_platform._get_backend_priorities = without_backend(cuda_platform._get_backend_priorities,
                                                            AttentionBackendEnum.FLASH_ATTN)
    tq._HAS_FLASH_ATTN = True
    tq.flash_attn_varlen_func = sdpa_varlen
    return ("FlashAttention ops missing: boundary layers on TRITON_ATTN, TurboQuant's prefill attention "
            "through torch SDPA (sdpa_varlen) in place of flash_attn_varlen_func; engine core in-process")


def sdpa_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None, softmax_scale=None,
                causal=True, **_):
    """flash_attn_varlen_func's attention from torch's SDPA kernels: q [Nq, Hq, D], k, v [Nk, Hk, D]
    packed by cu_seqlens; causal aligned to the end of each sequence's keys (a query chunk after
    its cached tokens), K/V heads repeated for GQA."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention.bias import causal_lower_right

    out = torch.empty_like(q)
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    rep = q.shape[1] // k.shape[1]
    for i in range(len(cq) - 1):
        lq, lk = cq[i + 1] - cq[i], ck[i + 1] - ck[i]
        if lq == 0:
            continue
        qs = q[cq[i]:cq[i + 1]].transpose(0, 1).unsqueeze(0)
        ks = k[ck[i]:ck[i + 1]].repeat_interleave(rep, dim=1).transpose(0, 1).unsqueeze(0)
        vs = v[ck[i]:ck[i + 1]].repeat_interleave(rep, dim=1).transpose(0, 1).unsqueeze(0)
        if causal and lq == lk:
            o = F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, scale=softmax_scale)
        elif causal:
            o = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=causal_lower_right(lq, lk), scale=softmax_scale)
        else:
            o = F.scaled_dot_product_attention(qs, ks, vs, scale=softmax_scale)
        out[cq[i]:cq[i + 1]] = o[0].transpose(0, 1)
    return out


def without_backend(priorities, backend):
    """A backend-priorities function that never lists `backend`."""
    def pick(*args, **kwargs):
        return [b for b in priorities(*args, **kwargs) if b != backend]
    return pick


def trace_batch(engine, prompts, params, tag) -> list[tuple[float, dict[str, int], set[str]]]:
    """Submit every prompt at once and step the engine to the end; after each step that returned
    outputs: (seconds since submission, tokens so far per request, requests finished so far)."""
    ids = [f"{tag}-{i}" for i in range(len(prompts))]
    t0 = time.perf_counter()
    for rid, p in zip(ids, prompts):
        engine.add_request(rid, p, params)
    tokens, finished, trace = dict.fromkeys(ids, 0), set(), []
    while engine.has_unfinished_requests():
        outs = engine.step()
        if not outs:
            continue
        for o in outs:
            tokens[o.request_id] = max(tokens[o.request_id], len(o.outputs[0].token_ids))
            if o.finished:
                finished.add(o.request_id)
        trace.append((time.perf_counter() - t0, dict(tokens), set(finished)))
    return trace


def timings(trace, prompt_tokens: int) -> dict:
    """The row's times from trace_batch's trace: each request's first token, the prefill rate, and
    the decode rate in the steps where every request decodes (from the step where the last one has
    its first token to the step where the first one finishes)."""
    if not trace:
        raise ValueError("the engine returned no outputs")
    ids = list(trace[-1][1])
    first = {}
    for t, tokens, _ in trace:
        for rid in ids:
            if rid not in first and tokens[rid] >= 1:
                first[rid] = t
    if len(first) < len(ids):
        raise ValueError(f"{len(ids) - len(first)} of {len(ids)} requests produced no token")
    t_all = max(first.values())
    start = next(i for i, (t, _, _) in enumerate(trace) if t >= t_all)
    end = next((i for i, (_, _, done) in enumerate(trace) if done), len(trace) - 1)
    if end <= start:
        raise ValueError("the first request finished before the last one had its first token: raise --decode")
    n0, n1 = sum(trace[start][1].values()), sum(trace[end][1].values())
    dt = trace[end][0] - trace[start][0]
    return dict(ttft_first_s=round(min(first.values()), 3), batch_ttft_s=round(t_all, 3),
                prefill_tok_s=round(prompt_tokens / t_all, 1), decode_steps=end - start,
                decode_tok_s=round((n1 - n0) / dt, 1), step_ms=round(1000 * dt / (end - start), 2),
                total_s=round(trace[-1][0], 2))


class output_to:
    """File descriptors 1 and 2 (the engine logs to stdout) into `path` while the engine starts:
    the engine-core process it spawns keeps writing its log there."""
    def __init__(self, path):
        self.path = path

    def __enter__(self):
        sys.stdout.flush()
        sys.stderr.flush()
        self.f = open(self.path, "a")
        self.saved = [os.dup(1), os.dup(2)]
        os.dup2(self.f.fileno(), 1)
        os.dup2(self.f.fileno(), 2)

    def __exit__(self, *exc):
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, saved in zip((1, 2), self.saved):
            os.dup2(saved, fd)
            os.close(saved)
        self.f.close()


class Group:
    """The engines built together under --parallel: each says when it is built (or failed), and
    they take the GPU one at a time once every one is built."""
    def __init__(self, path, size):
        self.path, self.size, self._said = path, size, False

    @classmethod
    def from_env(cls):
        return cls(os.environ.get("E2E_GROUP_DIR"), int(os.environ.get("E2E_GROUP_SIZE", "1")))

    def built(self):
        if self.path and not self._said:
            self._said = True
            open(os.path.join(self.path, f"built.{os.getpid()}"), "w").close()

    def wait_all_built(self, timeout_s=1800):
        t0 = time.time()
        while self.path and sum(f.startswith("built.") for f in os.listdir(self.path)) < self.size:
            if time.time() - t0 > timeout_s:
                raise SystemExit(f"e2e_throughput: the other engines of the group were not built in {timeout_s} s")
            time.sleep(1)

    @contextlib.contextmanager
    def gpu_turn(self):
        if not self.path:
            yield
            return
        with open(os.path.join(self.path, "gpu.lock"), "w") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            yield


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


def child_argv(argv: list[str]) -> list[str]:
    """The flags a dtype's own process gets: all but those run_each decides (--kv, --concurrency,
    --budget-s, --parallel), in both the `--flag value` and the `--flag=value` form."""
    own = ("--kv", "--concurrency", "--budget-s", "--parallel")
    out, skip = [], False
    for x in argv:
        if skip:
            skip = False
        elif x in own:
            skip = True
        elif not x.split("=", 1)[0] in own:
            out.append(x)
    return out


def run_each(a) -> int:
    """Each --kv dtype in its own process, the same flags, --parallel at a time; `bf16max` from
    auto's row (auto then runs alone first)."""
    import subprocess
    import tempfile

    kvs = [k.strip() for k in a.kv.split(",") if k.strip()]
    if "bf16max" in a.concurrency and kvs[0] != "auto":
        raise SystemExit("--concurrency bf16max: put auto first in --kv (its maximum is measured by its own run)")
    if a.parallel > 1 and not a.kv_gib:
        raise SystemExit("--parallel: give --kv-gib (engines built side by side would size their KV cache from "
                         "each other's memory) and a --gpu-mem that --parallel processes fit in")
    base = child_argv(sys.argv[1:])
    groups = [[kvs[0]]] + [kvs[i:i + a.parallel] for i in range(1, len(kvs), a.parallel)] \
        if "bf16max" in a.concurrency else [kvs[i:i + a.parallel] for i in range(0, len(kvs), a.parallel)]
    t0, rc, bf16max = time.time(), 0, None
    for group in groups:
        if a.budget_s and time.time() - t0 > a.budget_s:
            with open(a.out, "a") as f:
                for kv in group:
                    f.write(json.dumps(dict(model=a.model_config, kv_cache_dtype=kv, context_len=a.context,
                                            error=f"not run: --budget-s {a.budget_s:.0f} passed")) + "\n")
            continue
        conc = a.concurrency
        if "bf16max" in conc:
            conc = conc.replace("bf16max", str(bf16max) if bf16max else "")
        print(f"=== {', '.join(group)} (concurrency {conc}) at {time.time() - t0:.0f} s", flush=True)
        before = read_rows(a.out)
        gdir = tempfile.mkdtemp(prefix="e2e-group-")
        env = dict(os.environ, E2E_GROUP_DIR=gdir, E2E_GROUP_SIZE=str(len(group)))
        procs = {kv: subprocess.Popen([sys.executable, __file__, *base, "--kv", kv, "--concurrency", conc], env=env)
                 for kv in group}
        status = {}
        while len(status) < len(procs):      # one that dies unannounced must not keep the others waiting
            for kv, p in procs.items():
                if kv not in status and p.poll() is not None:
                    status[kv] = p.returncode
                    open(os.path.join(gdir, f"built.{p.pid}"), "w").close()
            time.sleep(1)
        rc |= max(status.values())
        new = read_rows(a.out)[len(before):]
        with open(a.out, "a") as f:
            for kv in group:
                if not any(r.get("kv_cache_dtype") == kv for r in new):   # died before writing its row
                    f.write(json.dumps(dict(model=a.model_config, kv_cache_dtype=kv, context_len=a.context,
                                            error=f"the process exited with status {status[kv]} and wrote no row"))
                            + "\n")
        if "auto" in group:
            mc = next((r.get("max_concurrency") for r in reversed(new)
                       if r.get("kv_cache_dtype") == "auto" and r.get("max_concurrency")), None)
            bf16max = max(1, int(mc)) if mc else None
    print_table(read_rows(a.out)[-1000:], set(kvs), a.context)
    return rc


def read_rows(path) -> list[dict]:
    return [json.loads(line) for line in open(path)] if os.path.exists(path) else []


def print_table(rows, kvs, context):
    print("| kv | KV tokens | max concurrency | concurrency | TTFT first / last s | decode tok/s | ms/step | error |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r.get("kv_cache_dtype") in kvs and r.get("context_len") == context:
            print(f"| {r['kv_cache_dtype']} | {r.get('kv_tokens')} | {r.get('max_concurrency')} | "
                  f"{r.get('concurrency')} | {r.get('ttft_first_s')} / {r.get('batch_ttft_s')} | "
                  f"{r.get('decode_tok_s')} | {r.get('step_ms')} | {(r.get('error') or '')[:120]} |")


if __name__ == "__main__":
    sys.exit(main())
