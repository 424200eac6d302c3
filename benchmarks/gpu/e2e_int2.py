#!/usr/bin/env python3
"""int2 vs bf16 KV cache in the real engine on a tiny model (H200, aphrodite 0.21.0).

  python3 benchmarks/gpu/e2e_int2.py --model DIR --label NAME [--kv auto|int2] [--graph] [--lm-only]
      [--chunk N] [--repeat] [--prefix-caching on|off]

Greedy-decodes fixed prompts, prints the engine's KV-capacity line and one
`E2E_RESULT {json}` line (token ids included) so two runs can be compared.
"""
import argparse
import json
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--label", required=True)
    ap.add_argument("--kv", default="int2")
    ap.add_argument("--graph", action="store_true")
    ap.add_argument("--lm-only", action="store_true")
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--tp", type=int, default=1, help="tensor_parallel_size")
    ap.add_argument("--chunk", type=int, default=0,
                    help="max_num_batched_tokens: prefill the long prompts in chunks of this many tokens")
    ap.add_argument("--blocks", type=int, default=0,
                    help="num_gpu_blocks_override: a small KV pool, so the scheduler preempts and recomputes; "
                         "runs the engine core in-process to count the preemptions")
    ap.add_argument("--prefix-caching", choices=["on", "off"],
                    help="enable_prefix_caching (default: the engine's; 0.21 turns it off on hybrid models). "
                         "Off, int2's window is a ring of one page per request where a page holds the window")
    ap.add_argument("--repeat", action="store_true",
                    help="generate the prompts a second time (prefix-cache hits) and record both passes")
    a = ap.parse_args()
    import os

    preemptions = []
    if a.blocks:
        os.environ["APHRODITE_ENABLE_V1_MULTIPROCESSING"] = "0"   # the scheduler in this process
        from aphrodite.v1.core.sched.scheduler import Scheduler

        orig = Scheduler._preempt_request

        def counted(self, request, *args, **kwargs):
            preemptions.append(request.request_id)
            return orig(self, request, *args, **kwargs)

        Scheduler._preempt_request = counted
    from aphrodite import LLM, SamplingParams

    kw = dict(model=a.model, tokenizer=a.model, dtype="bfloat16", max_model_len=2048,
              gpu_memory_utilization=0.3, enforce_eager=not a.graph, seed=0,
              kv_cache_dtype=a.kv, gdn_prefill_backend="triton", tensor_parallel_size=a.tp,
              max_num_seqs=8)   # 6 prompts; fewer CUDA-graph sizes to capture (start-up time on the H200)
    if a.prefix_caching:
        kw["enable_prefix_caching"] = a.prefix_caching == "on"
    if a.chunk:
        kw.update(max_num_batched_tokens=a.chunk, enable_chunked_prefill=True)
    if a.blocks:
        kw["num_gpu_blocks_override"] = a.blocks
    if a.kv != "int2":
        kw["attention_config"] = {"backend": "TRITON_ATTN"}
    if a.lm_only:
        kw["language_model_only"] = True
    t0 = time.perf_counter()
    llm = LLM(**kw)
    init_s = time.perf_counter() - t0
    # the last two prompts are longer than the default recent window (128): int2 is read there
    prompts = ["The Zen of Python says", "Beautiful is better than ugly. Explicit is better than",
               "Namespaces are one honking great idea", "Errors should never pass silently. " * 12,
               "Now is better than never. Although never is often better than right now. " * 30,
               " ".join(f"item {i}: value {i * 7 % 101}." for i in range(150))]
    sp = SamplingParams(temperature=0.0, max_tokens=a.max_tokens, ignore_eos=True, logprobs=1)
    outs = llm.generate(prompts, sp, use_tqdm=False)
    env = {k: v for k, v in os.environ.items() if k.startswith("APHRODITE_INT2KV_")}
    res = {"label": a.label, "kv": a.kv, "graph": a.graph, "tp": a.tp, "chunk": a.chunk, "blocks": a.blocks, "prefix_caching": a.prefix_caching,
           "preemptions": len(preemptions) if a.blocks else None, "init_s": round(init_s, 1), "env": env,
           "prompt_tokens": [len(o.prompt_token_ids) for o in outs],
           "tokens": [list(o.outputs[0].token_ids) for o in outs],
           "logprobs": [[round(float(next(iter(lp.values())).logprob), 4) for lp in o.outputs[0].logprobs]
                        for o in outs]}
    if a.repeat:
        # second pass: the prompts' full blocks come from the prefix cache (int2 pages and, with the
        # recent window, its pages); greedy tokens should match the first pass
        outs2 = llm.generate(prompts, sp, use_tqdm=False)
        res["repeat_cached_tokens"] = [getattr(o, "num_cached_tokens", None) for o in outs2]
        res["repeat_tokens"] = [list(o.outputs[0].token_ids) for o in outs2]
        res["repeat_logprobs"] = [[round(float(next(iter(lp.values())).logprob), 4) for lp in o.outputs[0].logprobs]
                                  for o in outs2]
        same = [sum(1 for _ in iter_prefix(x, y)) for x, y in zip(res["tokens"], res["repeat_tokens"])]
        res["repeat_agreement"] = same
        print(f"prefix-cache repeat: cached tokens {res['repeat_cached_tokens']}, greedy agreement with the "
              f"first pass {same} of {a.max_tokens}", flush=True)
    print("E2E_RESULT " + json.dumps(res), flush=True)


def iter_prefix(x, y):
    for p, q in zip(x, y):
        if p != q:
            return
        yield p


if __name__ == "__main__":
    main()
