"""``aphrodite-int2kv eval --engine``: a real model through the real engine on a GPU, one process per
KV-cache dtype, the same prompts for each: perplexity from prompt logprobs (small prefill chunks, so
most tokens attend to the cached prefix as decode does), greedy agreement with bf16, and the
long-context set (longctx.py) scored on the final answer. See docs/quality.md.

The model is SmolLM2-135M-Instruct's GGUF (assets.py), dequantized once into a plain Llama
checkpoint (bf16 safetensors, `hf_checkpoint`) that the engine loads like any Hugging Face model:
its own GGUF path is not what we measure. Token ids go in and come out (no tokenizer in the
engine), tokenized here with the GGUF's own vocabulary.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import time

# label -> (--kv-cache-dtype, extra environment)
CONFIGS = {
    "bf16": ("auto", {}),
    "int2": ("int2", {}),
    "int2-k4": ("int2", {"APHRODITE_INT2KV_K_BITS": "4"}),
    "int2-tokens": ("int2", {"APHRODITE_INT2KV_FORMAT": "tokens"}),
    "fp8": ("fp8", {}),
}


def engine_kv_dtypes() -> list[str]:
    """The --kv-cache-dtype values the installed engine offers (its CacheDType), int2 included
    once the plugin is registered."""
    import typing

    from aphrodite.config import cache

    return list(typing.get_args(cache.CacheDType))


def kv_config(label: str) -> tuple[str, dict]:
    """(--kv-cache-dtype, extra environment) of a --kv label: ours (CONFIGS), or any dtype the
    engine offers by its own name (turboquant_k8v4, int8_per_token_head, ...)."""
    if label in CONFIGS:
        return CONFIGS[label]
    offered = engine_kv_dtypes()
    if label not in offered:
        raise SystemExit(f"--kv: {label!r} is neither one of {', '.join(CONFIGS)} nor a KV-cache dtype this "
                         f"engine offers ({', '.join(d for d in offered if d != 'auto')})")
    return label, {}


def baseline_backend(kv_dtype: str) -> dict:
    """attention_config for an engine dtype: the engine's Triton backend where it supports the dtype
    (FlashAttention is not on every install), else the engine's own choice (TurboQuant's backend
    for its presets). For int2 the selection applies to the layers int2 does not take (a Gemma
    model's sliding-window layers, in the model dtype); int2 layers keep the plugin's backend."""
    from aphrodite.v1.attention.backends.triton_attn import TritonAttentionBackend

    if kv_dtype == "int2" or kv_dtype in TritonAttentionBackend.supported_kv_cache_dtypes:
        return {"attention_config": {"backend": "TRITON_ATTN"}}
    return {}


HF_NAMES = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
            "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
            "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
            "ffn_down": "mlp.down_proj"}


# ---- the checkpoint ---------------------------------------------------------------------------

def hf_name(gguf_name: str) -> str:
    """GGUF tensor name -> the Hugging Face Llama name."""
    if gguf_name == "token_embd.weight":
        return "model.embed_tokens.weight"
    if gguf_name == "output_norm.weight":
        return "model.norm.weight"
    if gguf_name == "output.weight":
        return "lm_head.weight"
    m = re.fullmatch(r"blk\.(\d+)\.(\w+)\.weight", gguf_name)
    if not m or m.group(2) not in HF_NAMES:
        raise ValueError(f"unexpected GGUF tensor {gguf_name!r}")
    return f"model.layers.{m.group(1)}.{HF_NAMES[m.group(2)]}.weight"


def hf_checkpoint(gguf_path: str, out_dir: str, max_len: int = 8192):
    """Write out_dir/{config.json, model.safetensors} (bf16) from the GGUF; returns the tokenizer."""
    import torch
    from safetensors.torch import save_file

    from aphrodite_int2kv.quality import smollm

    cfg, sd, tok = smollm.load(gguf_path)
    os.makedirs(out_dir, exist_ok=True)
    tensors = {hf_name(k): v.to(torch.bfloat16).contiguous() for k, v in sd.items()}
    vocab, hidden = tensors["model.embed_tokens.weight"].shape
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
        "intermediate_size": tensors["model.layers.0.mlp.gate_proj.weight"].shape[0],
        "num_attention_heads": cfg.n_heads, "num_key_value_heads": cfg.n_kv_heads, "head_dim": cfg.head_dim,
        "num_hidden_layers": cfg.n_layers, "rms_norm_eps": cfg.eps, "rope_theta": cfg.rope_theta,
        "vocab_size": vocab, "max_position_embeddings": max_len, "tie_word_embeddings": "lm_head.weight" not in tensors,
        "hidden_act": "silu", "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": 2,
    }
    save_file(tensors, os.path.join(out_dir, "model.safetensors"))
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    return tok


def transformers_checkpoint(model: str, out_dir: str):
    """`eval --engine --model`: (checkpoint directory, harness tokenizer). A Hugging Face directory is
    served as it is; a GGUF file, or a model the harness knows by name (gemma-3-270m), is dequantized
    by transformers into out_dir (bf16 safetensors, config, tokenizer) once."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from aphrodite_int2kv.quality import assets
    from aphrodite_int2kv.quality.hf_model import HarnessTokenizer, pretrained_location

    if model in assets.NAMED_MODELS:
        model = assets.named_model_path(model)
    if os.path.isdir(model):
        return model, HarnessTokenizer(AutoTokenizer.from_pretrained(model))
    where = pretrained_location(model)
    tok = AutoTokenizer.from_pretrained(**where)
    if not os.path.isfile(os.path.join(out_dir, "config.json")):
        from safetensors.torch import save_file

        m = AutoModelForCausalLM.from_pretrained(**where, dtype=torch.bfloat16)
        tied = m.config.get_text_config().tie_word_embeddings
        # transformers will not save_pretrained a GGUF-loaded model: its tensors and config instead
        tensors = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in m.state_dict().items()
                   if not (tied and k == "lm_head.weight")}
        os.makedirs(out_dir, exist_ok=True)
        save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
        m.config.__dict__.pop("quantization_config", None)
        m.config.architectures = [type(m).__name__]
        m.config.save_pretrained(out_dir)
        tok.save_pretrained(out_dir)
    return out_dir, HarnessTokenizer(tok)


def engine_max_len(plan: dict) -> int:
    """max_model_len for a plan: its longest prompt (the 8K far-perplexity windows and their scored
    last token) plus room for the generated answers."""
    return max(8192, max((len(it["ids"]) for it in plan.get("suite", [])), default=0)) + 64


def allow_positions(model_dir: str, n: int):
    """Let the checkpoint's config admit n positions: the engine refuses a max_model_len above
    max_position_embeddings, which for this model's plain RoPE (no scaling) changes no output."""
    path = os.path.join(model_dir, "config.json")
    with open(path) as f:
        config = json.load(f)
    if config["max_position_embeddings"] < n:
        config["max_position_embeddings"] = n
        with open(path, "w") as f:
            json.dump(config, f, indent=1)


# ---- what each process is asked -----------------------------------------------------------------

def make_plan(tok, text: str, windows: int = 4, tokens: int = 1024, start: int = 78003,
              greedy_prompts: int = 4, greedy_tokens: int = 256, longctx_items: int = 10,
              suite: dict | None = None) -> dict:
    """Token ids for every measurement (the same for every dtype). `suite`: the long-context
    suite's flags (longctx.suite_items' arguments), scored from the engine's prompt log-probs."""
    from aphrodite_int2kv.quality import longctx

    ids = tok.encode(text).ids
    start = min(start, max(0, len(ids) - windows * tokens))
    ppl = [ids[start + w * tokens: start + (w + 1) * tokens] for w in range(windows)]
    # greedy prompts: 512 tokens of the text right after the perplexity windows
    g0 = start + windows * tokens
    greedy = [ids[g0 + i * 512: g0 + (i + 1) * 512] for i in range(greedy_prompts)]
    items = (longctx.needle_items(longctx_items, 40) + longctx.position_items(longctx_items, 6, 40)
             + longctx.order_items(longctx_items, 5, 30))
    plan = {"ppl": ppl, "greedy": greedy, "greedy_tokens": greedy_tokens,
            "longctx": [{"kind": k, "prompt": tok.encode(p).ids, "answer": a} for k, p, a in items], "suite": []}
    if suite:
        plan["suite"] = [{"label": label, "ids": seq.tolist(), "targets": (rows + 1).tolist()}
                         for label, seq, rows, _ in longctx.suite_items(tok, **suite)]
    return plan


def score_prompt_logprobs(prompt_logprobs, ids: list[int], targets: list[int]) -> dict:
    """The suite's figures for one item from the engine's prompt log-probs (prompt_logprobs=1: each
    position's own token with its rank): top-1 hits (rank 1), NLL, and whether every target was
    top-1 (what greedy decoding would have answered). A position without its token counts as a
    miss with NaN NLL."""
    top1, nll = 0, 0.0
    for t in targets:
        d = prompt_logprobs[t]
        v = None if d is None else d.get(ids[t])
        if v is None:
            nll = float("nan")
            continue
        top1 += getattr(v, "rank", None) == 1
        nll -= float(getattr(v, "logprob", v))
    return dict(n=len(targets), top1=top1, nll=nll, exact=top1 == len(targets))


# ---- scoring (pure functions: tested on CPU) -------------------------------------------------------

def perplexity(logprobs: list[list[float]], late_from: int | None = None) -> float:
    """exp(mean NLL) over every window's predicted tokens (positions >= late_from only, if given).
    logprobs[w][i] is the log-prob of token i + 1 of window w."""
    vals = [lp for win in logprobs for i, lp in enumerate(win) if late_from is None or i + 1 >= late_from]
    if not vals:
        raise ValueError("perplexity: no token to score")
    if any(math.isnan(v) for v in vals):
        return float("nan")
    return math.exp(-sum(vals) / len(vals))


def first_divergence(ref: list[int], other: list[int]) -> int:
    """Tokens the two greedy continuations share before they first differ."""
    n = 0
    for a, b in zip(ref, other):
        if a != b:
            break
        n += 1
    return n


LIST_WORDS = {"and", "the", "then", "a", "an"}    # words that join a list, not items of it


def extract_answer(text: str) -> str:
    """The final answer: the first number in the continuation, or its first line's words for the
    ordered-list items (scored as a comma-separated list; the words that join a list -- "and",
    "the", "then" -- are not items)."""
    m = re.search(r"\d+", text)
    if m:
        return m.group(0)
    line = text.strip().split("\n", 1)[0]
    return ", ".join(w for w in re.findall(r"[a-z]+", line.lower()) if w not in LIST_WORDS)



def score_answer(kind: str, got: str, want: str) -> bool:
    if kind == "order":      # every item, in order: the list as given, nothing before it
        return got.split(", ")[:len(want.split(", "))] == want.split(", ")
    return got == want


def summarize(results: dict, late_from: int) -> list[dict]:
    """One row per dtype: PPL (all / late half) and its change against bf16, greedy agreement, the
    long-context answers (right, and equal to bf16's)."""
    ref = results.get("bf16")
    rows = []
    for label, r in results.items():
        row = {"kv": label, "error": r.get("error")}
        if r.get("error"):
            rows.append(row)
            continue
        row["ppl"] = perplexity(r["ppl"])
        row["ppl_late"] = perplexity(r["ppl"], late_from)
        if ref and not ref.get("error"):
            base, base_late = perplexity(ref["ppl"]), perplexity(ref["ppl"], late_from)
            row["ppl_delta"] = row["ppl"] / base - 1
            row["ppl_late_delta"] = row["ppl_late"] / base_late - 1
            pairs = list(zip(ref["greedy"], r["greedy"]))
            row["agree_tokens"] = [first_divergence(a, b) for a, b in pairs]
            if r.get("forced") is not None and label != "bf16":
                gaps = [sum(x - y for x, y in zip(a, b)) / max(1, len(a)) for a, b in zip(ref["greedy_lp"], r["forced"])]
                row["logprob_gap"] = sum(gaps) / max(1, len(gaps))
            same = [a == b for a, b in zip(ref["answers"], r["answers"])]
            row["answers_equal_bf16"] = sum(same) / max(1, len(same))
        if r.get("suite") and ref and ref.get("suite"):
            from aphrodite_int2kv.quality.longctx import summarize as summarize_suite

            row["suite"] = summarize_suite(r["suite"], ref["suite"])
        right = [score_answer(k, a, w) for k, a, w in zip(r["kinds"], r["answers"], r["wanted"])]
        row["answers_right"] = sum(right) / max(1, len(right))
        row["items"] = len(right)
        rows.append(row)
    return rows


def markdown(rows: list[dict]) -> str:
    def pct(x):
        return "" if x is None else f"{100 * x:+.1f} %"

    def num(x, fmt):
        return "" if x is None else format(x, fmt)

    out = ["| KV cache | PPL | Δ | PPL late half | Δ | greedy tokens equal to bf16 (per prompt) | "
           "log-prob gap | long-context right | answers = bf16 |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r.get("error"):
            out.append(f"| {r['kv']} | error: {r['error'][:80]} | | | | | | | |")
            continue
        equal = r.get("answers_equal_bf16")
        out.append(f"| {r['kv']} | {r['ppl']:.2f} | {pct(r.get('ppl_delta'))} | {r['ppl_late']:.2f} | "
                   f"{pct(r.get('ppl_late_delta'))} | {', '.join(map(str, r.get('agree_tokens', [])))} | "
                   f"{num(r.get('logprob_gap'), '.3f')} | {100 * r['answers_right']:.0f} % of {r['items']} | "
                   f"{'' if equal is None else f'{100 * equal:.0f} %'} |")
    suite = [r for r in rows if r.get("suite")]
    if suite:
        tasks = list(suite[0]["suite"])
        out += ["", "| KV cache | " + " | ".join(tasks) + " |", "|---|" + "---|" * len(tasks)]
        for r in suite:
            cells = []
            for t in tasks:
                m = r["suite"][t]
                cells.append(f"{100 * m['top1']:.1f} % top-1" if t.startswith("copy") else
                             f"{100 * m['rel']:+.1f} % PPL" if t.startswith("far") else f"{m['right']} of {m['fp_right']}")
            out.append(f"| {r['kv']} | " + " | ".join(cells) + " |")
    return "\n".join(out)


# ---- one dtype, in its own process --------------------------------------------------------------

def worker(model_dir: str, kv_dtype: str, plan: dict, ref: dict | None, chunk: int, graphs: bool) -> dict:
    from aphrodite import LLM, SamplingParams

    from aphrodite.inputs import TokensPrompt

    kw = dict(model=model_dir, skip_tokenizer_init=True, dtype="bfloat16", kv_cache_dtype=kv_dtype,
              max_model_len=engine_max_len(plan),
              max_num_batched_tokens=chunk, enable_chunked_prefill=True,
              enable_prefix_caching=False, gpu_memory_utilization=0.5, enforce_eager=not graphs, seed=0,
              max_num_seqs=16)
    kw.update(baseline_backend(kv_dtype))
    llm = LLM(**kw)

    def prompts(seqs):
        return [TokensPrompt(prompt_token_ids=list(s)) for s in seqs]

    res = {}
    # perplexity: log-prob of each window's tokens 1.. given what precedes them
    outs = llm.generate(prompts(plan["ppl"]), SamplingParams(max_tokens=1, prompt_logprobs=0, detokenize=False),
                        use_tqdm=False)
    res["ppl"] = [[_lp(d, t) for d, t in zip(o.prompt_logprobs[1:], w[1:])] for o, w in zip(outs, plan["ppl"])]
    # greedy continuations (and, for bf16, their log-probs)
    g = SamplingParams(temperature=0.0, max_tokens=plan["greedy_tokens"], ignore_eos=True, logprobs=0,
                       detokenize=False)
    outs = llm.generate(prompts(plan["greedy"]), g, use_tqdm=False)
    res["greedy"] = [list(o.outputs[0].token_ids) for o in outs]
    res["greedy_lp"] = [[_lp(d, t) for d, t in zip(o.outputs[0].logprobs, o.outputs[0].token_ids)] for o in outs]
    # bf16's continuation under this cache: the log-probs it gives the same tokens
    if ref is not None:
        seqs = [p + c for p, c in zip(plan["greedy"], ref["greedy"])]
        outs = llm.generate(prompts(seqs), SamplingParams(max_tokens=1, prompt_logprobs=0, detokenize=False),
                            use_tqdm=False)
        res["forced"] = [[_lp(d, t) for d, t in zip(o.prompt_logprobs[len(p):], s[len(p):])]
                         for o, p, s in zip(outs, plan["greedy"], seqs)]
    else:
        res["forced"] = None
    if plan.get("suite"):   # the long-context suite, read back from the cache in chunks of `chunk`
        outs = llm.generate(prompts([it["ids"] for it in plan["suite"]]),
                            SamplingParams(max_tokens=1, prompt_logprobs=1, detokenize=False), use_tqdm=False)
        res["suite"] = [dict(label=it["label"], **score_prompt_logprobs(o.prompt_logprobs, it["ids"], it["targets"]))
                        for o, it in zip(outs, plan["suite"])]
    items = plan["longctx"]
    outs = llm.generate(prompts([it["prompt"] for it in items]),
                        SamplingParams(temperature=0.0, max_tokens=24, detokenize=False), use_tqdm=False)
    res["answer_ids"] = [list(o.outputs[0].token_ids) for o in outs]
    return res


def _lp(d, token) -> float:
    """The log-prob of `token` in one position's {token id: Logprob} (NaN where the engine gave none)."""
    if d is None or token not in d:
        return float("nan")
    v = d[token]
    return float(getattr(v, "logprob", v))


# ---- the driver ----------------------------------------------------------------------------------

def add_arguments(p):
    p.add_argument("--engine", action="store_true",
                   help="run the real engine on the GPU, one process per KV dtype (this module)")
    p.add_argument("--model-dir", default=None, help="where the Llama checkpoint is written (default: cache)")
    p.add_argument("--kv", default=",".join(CONFIGS),
                   help=f"dtypes to compare, bf16 first: {', '.join(CONFIGS)}, or any KV-cache dtype the engine "
                        "offers by its name (e.g. turboquant_k8v4, int8_per_token_head)")
    p.add_argument("--chunk", type=int, default=64, help="prefill chunk (max_num_batched_tokens)")
    p.add_argument("--greedy-tokens", type=int, default=256)
    p.add_argument("--items", type=int, default=10, help="long-context items per kind")
    p.add_argument("--graphs", action="store_true", help="CUDA graphs (default: eager)")
    p.add_argument("--worker-timeout", type=int, default=300, help="seconds one dtype's process may take")
    p.add_argument("--markdown", default=None, help="write the table here")
    p.add_argument("--suite", action="store_true",
                   help="also the long-context suite (copy test, far perplexity, pass keys, as `longctx` measures "
                        "them in the harness), scored from the engine's prompt log-probs")
    from aphrodite_int2kv.quality.longctx import add_suite_arguments
    add_suite_arguments(p)


def run_engine(args) -> int:
    from aphrodite_int2kv.quality import assets

    labels = [s.strip() for s in args.kv.split(",") if s.strip()]
    configs = {s: kv_config(s) for s in labels}
    if labels[0] != "bf16":
        raise SystemExit("--kv: bf16 must come first (the others are compared against it)")
    model = getattr(args, "model", None)
    default = "smollm2-135m-llama" if not model else os.path.basename(model.rstrip("/")).removesuffix(".gguf")
    work = args.model_dir or os.path.join(assets.cache_dir(), default + "-engine" * bool(model))
    t0 = time.time()
    if model:      # any causal LM transformers reads (a directory, a GGUF file, gemma-3-270m)
        ckpt, tok = transformers_checkpoint(model, os.path.join(work, "checkpoint"))
    else:          # SmolLM2-135M from its GGUF, as a Llama checkpoint
        ckpt, tok = work, hf_checkpoint(assets.model_path(), work)
    with open(assets.text_path(args.text), encoding="utf-8") as f:
        from aphrodite_int2kv.quality.longctx import suite_flags

        suite = suite_flags(args) if args.suite else None
        plan = make_plan(tok, f.read(), args.windows, args.tokens, args.start, greedy_tokens=args.greedy_tokens,
                         longctx_items=args.items, suite=suite)
    if ckpt.startswith(work):   # a checkpoint written here (never a user's directory)
        allow_positions(ckpt, engine_max_len(plan))
    plan_path = os.path.join(work, "plan.json")
    with open(plan_path, "w") as f:
        json.dump(plan, f)
    print(f"[eval --engine] checkpoint and plan in {time.time() - t0:.0f}s: {work}", file=sys.stderr, flush=True)
    results = {}
    for i, label in enumerate(labels):
        dtype, env = configs[label]
        out = os.path.join(work, f"result_{label}.json")
        if os.path.exists(out):
            os.remove(out)
        cmd = [sys.executable, "-m", "aphrodite_int2kv.quality.engine_eval", "worker", ckpt, dtype, plan_path, out,
               str(args.chunk), "1" if args.graphs else "0"]
        if i and not results["bf16"].get("error"):
            cmd.append(os.path.join(work, "result_bf16.json"))
        print(f"[{i + 1}/{len(labels)}] {label}: --kv-cache-dtype {dtype} {env or ''}", file=sys.stderr, flush=True)
        t = time.time()
        log = os.path.join(work, f"worker_{label}.log")
        try:
            with open(log, "w") as f:
                rc = subprocess.run(cmd, env={**os.environ, **env}, timeout=args.worker_timeout,
                                    stdout=f, stderr=subprocess.STDOUT).returncode
        except subprocess.TimeoutExpired:
            rc = f"timed out after {args.worker_timeout} s"
        if rc or not os.path.exists(out):
            # a dtype that refuses the model or crashes: that is its result, with the engine's reason
            results[label] = {"error": f"worker exited {rc}: {failure_reason(log)}"}
            print(f"    {results[label]['error']}", file=sys.stderr, flush=True)
            continue
        with open(out) as f:
            r = json.load(f)
        r["answers"] = [extract_answer(tok.decode(ids)) for ids in r.pop("answer_ids")]
        r["kinds"] = [it["kind"] for it in plan["longctx"]]
        r["wanted"] = [it["answer"] for it in plan["longctx"]]
        r["seconds"] = round(time.time() - t, 1)
        results[label] = r
        print(f"    done in {r['seconds']}s", file=sys.stderr, flush=True)
    rows = summarize(results, args.tokens // 2)
    table = markdown(rows)
    print(table)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "answers": {k: v.get("answers") for k, v in results.items()},
                       "wanted": plan and [it["answer"] for it in plan["longctx"]],
                       "settings": {"chunk": args.chunk, "windows": args.windows, "tokens": args.tokens,
                                    "start": args.start, "text": args.text, "graphs": args.graphs}}, f, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table + "\n")
    return 0 if all(not r.get("error") for r in rows) else 1


def failure_reason(log_path: str, lines: int = 3) -> str:
    """The last exception lines of a worker's log (its 'XError: ...' lines), or its last lines."""
    try:
        with open(log_path, errors="replace") as f:
            text = f.read().splitlines()
    except OSError:
        return "no log"
    errors = [ln.strip() for ln in text if re.match(r"^\s*[A-Za-z_.]*(Error|Exception)\b.*:", ln)]
    return " | ".join((errors or [ln.strip() for ln in text if ln.strip()])[-lines:])[:600]


def _worker_main(argv):
    model_dir, dtype, plan_path, out, chunk, graphs = argv[:6]
    with open(plan_path) as f:
        plan = json.load(f)
    ref = None
    if len(argv) > 6:
        with open(argv[6]) as f:
            ref = json.load(f)
    res = worker(model_dir, dtype, plan, ref, int(chunk), graphs == "1")
    with open(out, "w") as f:
        json.dump(res, f)


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        _worker_main(sys.argv[2:])
    else:
        raise SystemExit("use `aphrodite-int2kv eval --engine`")
