"""int2 in the real engine on a GPU, as users run it: `LLM(..., kv_cache_dtype="int2")` on a tiny
dense, a tiny hybrid (Gated DeltaNet + attention), a tiny Gemma-3-style (sliding-window layers
beside global ones) and a tiny gpt-oss-style (windows and learned attention sinks) model with
dummy weights, eager and with CUDA graphs, prefix caching on and off. Each engine runs in a fresh interpreter with its engine core in
that process, where spies count the glue every int2 request goes through (never replacing it):
the metadata builder, its CUDA-graph capture path, the recent window found through the forward
context, and the backend routing that sends the layers to our backend. Then the real SmolLM2-135M
(peaked logits) for outputs: alone = in a batch that is preempted = after a prefix-cache hit.
Each engine is given its KV memory (kv_cache_memory_bytes), so it does not profile the GPU's free
memory and engines may run side by side.

Run on the GPU machine by benchmarks/gpu_tests.py; skipped (and declared GPU-only) elsewhere."""

from __future__ import annotations

import json
import os

import pytest
import torch

from aphrodite_int2kv_tests.conftest import run_python

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

CHILD = r'''
import collections, json, os, sys
os.environ["APHRODITE_ENABLE_V1_MULTIPROCESSING"] = "0"
import aphrodite_int2kv
aphrodite_int2kv.register()
from aphrodite_int2kv.engine import backend as B
import aphrodite.platforms.cuda as cuda_platform

calls = collections.Counter()

def spy(owner, name, key, ok=lambda r: True):
    real = getattr(owner, name)
    def wrapped(*a, **k):
        r = real(*a, **k)
        if ok(r):
            calls[key] += 1
        return r
    setattr(owner, name, wrapped)

spy(B.Int2MetadataBuilder, "build", "metadata_build")
spy(B.Int2MetadataBuilder, "build_for_cudagraph_capture", "cudagraph_capture")
spy(B.Int2AttentionImpl, "_window_state", "window_found", ok=lambda r: r is not None)
spy(cuda_platform, "_get_backend_priorities", "backend_routing",
    ok=lambda r: any("CUSTOM" in str(b) for b in (r or [])))
spy(B.Int2AttentionImpl, "forward", "int2_forward")
real_loaded = B.Int2AttentionImpl.process_weights_after_loading
def loaded(self, *a, **k):            # gpt-oss: the learned sink logits reach the int2 layers' kernels
    real_loaded(self, *a, **k)
    if self._sinks_log2 is not None:
        calls["sinks_prepared"] += 1
B.Int2AttentionImpl.process_weights_after_loading = loaded

from aphrodite import LLM, SamplingParams
from aphrodite.inputs import TokensPrompt
spec = json.loads(sys.argv[1])
if spec.get("format") == "tiles-k4":                # the tile format with 4-bit keys
    os.environ["APHRODITE_INT2KV_K_BITS"] = "4"
elif spec.get("format") == "fp8-local":             # the default format; sliding-window layers in fp8
    os.environ["APHRODITE_INT2KV_LOCAL_KV_DTYPE"] = "fp8"
elif spec.get("format") not in (None, "default", "fp8-local"):   # default: FORMAT unset (tiles)
    os.environ["APHRODITE_INT2KV_FORMAT"] = spec["format"]
kw = dict(model=spec["model"], load_format="dummy", skip_tokenizer_init=True, dtype="bfloat16", seed=0,
          kv_cache_dtype="int2", enforce_eager=spec["eager"], enable_prefix_caching=spec["prefix"],
          gpu_memory_utilization=0.2, kv_cache_memory_bytes=2 << 30, max_model_len=2048, max_num_seqs=16)
if spec["hybrid"]:
    kw.update(gdn_prefill_backend="triton")
if spec.get("local_backend"):      # the backend of the layers int2 does not take
    kw.update(attention_config={"backend": spec["local_backend"]})
llm = LLM(**kw)
import random
rng = random.Random(0)
shared = [rng.randrange(1, 500) for _ in range(640)]
prompts = [shared + [rng.randrange(1, 500) for _ in range(40 * i)] for i in range(4)]
params = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True, detokenize=False)
outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
again = llm.generate([TokensPrompt(prompt_token_ids=prompts[0])], params, use_tqdm=False)
print("RESULT " + json.dumps(dict(calls=dict(calls), lengths=[len(o.outputs[0].token_ids) for o in outs],
                                  first=list(outs[0].outputs[0].token_ids), again=list(again[0].outputs[0].token_ids))))
'''


def _dense(tmp_path):
    from aphrodite_int2kv.engine.offline import heads_dir

    return heads_dir(tmp_path, 8, 2, 128, max_positions=4096)


def _hybrid(tmp_path):
    from transformers import Qwen3NextConfig

    Qwen3NextConfig(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                    num_attention_heads=8, num_key_value_heads=2, head_dim=256, linear_conv_kernel_dim=4,
                    linear_key_head_dim=128, linear_value_head_dim=128, linear_num_key_heads=4,
                    linear_num_value_heads=8, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64,
                    shared_expert_intermediate_size=64, decoder_sparse_step=1, mlp_only_layers=[],
                    layer_types=["linear_attention"] * 3 + ["full_attention"], max_position_embeddings=4096,
                    architectures=["Qwen3NextForCausalLM"], torch_dtype="bfloat16").save_pretrained(tmp_path)
    return str(tmp_path)


def _gemma(tmp_path):
    """Gemma-3-270M's attention (4 q / 1 KV head of 256, QK-norm, 5 local : 1 global), window 128 so
    that the prompts slide past it, 12 layers: int2 on layers 5 and 11."""
    from transformers import Gemma3TextConfig

    Gemma3TextConfig(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=12,
                     num_attention_heads=4, num_key_value_heads=1, head_dim=256, query_pre_attn_scalar=256,
                     sliding_window=128, max_position_embeddings=4096, architectures=["Gemma3ForCausalLM"],
                     torch_dtype="bfloat16").save_pretrained(tmp_path)
    return str(tmp_path)


def _gptoss(tmp_path):
    """gpt-oss's attention (8 q / 2 KV heads of 64, learned sink logits, 128-token windows on the
    even layers) and MoE (4 experts, unquantized), 4 layers: int2 on layers 1 and 3, with sinks."""
    from transformers import GptOssConfig

    GptOssConfig(vocab_size=512, hidden_size=256, intermediate_size=256, num_hidden_layers=4, num_local_experts=4,
                 num_experts_per_tok=2, head_dim=64, num_attention_heads=8, num_key_value_heads=2, sliding_window=128,
                 layer_types=["sliding_attention", "full_attention"] * 2, max_position_embeddings=4096,
                 architectures=["GptOssForCausalLM"], torch_dtype="bfloat16").save_pretrained(tmp_path)
    return str(tmp_path)


MODELS = {"dense": _dense, "hybrid": _hybrid, "gemma": _gemma, "gptoss": _gptoss}
LOCAL_LINES = {   # models with sliding-window layers: what the start-up line says of both sets
    "gemma": ("int2 KV cache active on 2 layers (layers 5, 11)",
              "10 sliding-window layers (window 128) (layers 0-4, 6-10) keep the engine's own auto cache"),
    "gptoss": ("int2 KV cache active on 2 layers (layers 1, 3)",
               "2 sliding-window layers (window 128) (layers 0, 2) keep the engine's own auto cache")}


@pytest.mark.parametrize("model,eager,prefix,fmt", [
    ("dense", True, False, "tokens"), ("dense", False, False, "tokens"), ("dense", False, True, "tokens"),
    ("hybrid", False, False, "tokens"), ("dense", True, False, "default"), ("dense", False, True, "tiles"),
    ("hybrid", False, False, "tiles"), ("gemma", True, False, "default"), ("gemma", False, True, "default"),
    ("gptoss", True, False, "default"), ("gptoss", False, True, "default"), ("dense", False, True, "tiles-k4"),
    ("gemma", False, True, "tiles-k4"), ("gemma", False, True, "fp8-local")])
def test_int2_generates_in_the_engine_through_its_own_glue(tmp_path, model, eager, prefix, fmt):
    path = MODELS[model](tmp_path)
    # sliding-window models: those layers keep the engine's cache on a backend the user selects
    # (Triton: the test machine carries no FlashAttention binaries); int2 layers keep ours
    spec = dict(model=path, eager=eager, prefix=prefix, hybrid=model == "hybrid", format=fmt,
                local_backend="TRITON_ATTN" if model in LOCAL_LINES else None)
    res = run_python(CHILD.replace("sys.argv[1]", repr(json.dumps(spec))), timeout=420)
    line = next((l for l in res.stdout.splitlines() if l.startswith("RESULT ")), None)
    assert line, res.stdout[-3000:] + res.stderr[-6000:]
    got = json.loads(line[len("RESULT "):])
    calls = got["calls"]
    assert got["lengths"] == [24] * 4
    assert calls.get("backend_routing", 0) > 0, calls            # the layers were sent to our backend
    assert calls.get("metadata_build", 0) > 0 and calls.get("int2_forward", 0) > 0, calls
    assert calls.get("window_found", 0) > 0, calls               # the recent window through the forward context
    if not eager:
        assert calls.get("cudagraph_capture", 0) > 0, calls      # the capture path ran
    assert "int2 KV cache active" in res.stdout + res.stderr
    if model in LOCAL_LINES:   # the start-up line names the int2 layers and the local ones
        log = res.stdout + res.stderr
        for part in LOCAL_LINES[model]:
            if fmt == "fp8-local":
                part = part.replace("own auto cache", "own fp8 cache")
            assert part in log, (part, log[-4000:])
    assert calls.get("sinks_prepared", 0) == (2 if model == "gptoss" else 0), calls
    assert ("format=tiles" in res.stdout + res.stderr) == (fmt != "tokens")   # tiles: the default
    assert ("format=tiles (K 4-bit" in res.stdout + res.stderr) == (fmt == "tiles-k4")
    # the same prompt again (alone, and a prefix-cache hit where caching is on) decodes the same
    # tokens for the first steps; dummy weights give near-flat logits, so only a prefix is compared
    assert got["again"][:4] == got["first"][:4], got


SMOLLM2_CHILD = r'''
import collections, json, os, sys
os.environ["APHRODITE_ENABLE_V1_MULTIPROCESSING"] = "0"
import aphrodite_int2kv
aphrodite_int2kv.register()
from aphrodite.v1.core.sched.scheduler import Scheduler

preempted = []
real_preempt = Scheduler._preempt_request
def spy_preempt(self, request, *a, **k):
    preempted.append(tuple(request.prompt_token_ids[:16]))
    return real_preempt(self, request, *a, **k)
Scheduler._preempt_request = spy_preempt

from aphrodite import LLM, SamplingParams
from aphrodite.inputs import TokensPrompt
spec = json.loads(sys.argv[1])
if spec.get("format"):
    os.environ["APHRODITE_INT2KV_FORMAT"] = spec["format"]
llm = LLM(model=spec["model"], skip_tokenizer_init=True, dtype="bfloat16", seed=0, kv_cache_dtype="int2",
          enforce_eager=False, enable_prefix_caching=True, gpu_memory_utilization=0.2, kv_cache_memory_bytes=1 << 30,
          max_model_len=2048,
          max_num_seqs=16, num_gpu_blocks_override=spec["blocks"])
params = SamplingParams(max_tokens=spec["max_tokens"], temperature=0.0, ignore_eos=True, logprobs=2, detokenize=False)

def run(prompts):
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
    rows = []
    for o in outs:
        c = o.outputs[0]
        margins = []
        for tok, lps in zip(c.token_ids, c.logprobs):
            others = [v.logprob for t, v in lps.items() if t != tok]
            margins.append(lps[tok].logprob - max(others) if others else 99.0)
        rows.append(dict(ids=list(c.token_ids), margins=margins, cached=o.num_cached_tokens or 0))
    return rows

prompts = spec["prompts"]
alone = [run([prompts[0]])[0]]                   # alone: a prefix-cache miss
hit = run([prompts[0]])[0]                        # the same prompt again, at once: a prefix-cache hit
alone += [run([p])[0] for p in prompts[1:]]       # the others alone
n_alone = len(preempted)
batch = run(prompts)                              # all at once: more than the pool holds
print("RESULT " + json.dumps(dict(alone=alone, hit=hit, batch=batch, preempted_alone=n_alone,
                                  preempted=[list(p) for p in preempted[n_alone:]])))
'''


def _agree_where_decided(ref: dict, other: dict, margin: float = 1.0) -> int:
    """Greedy tokens of `other` equal `ref`'s until they part, and they may part only at a close
    call of ref's (top-1 minus top-2 log-prob below `margin`): a batch's bf16 arithmetic differs,
    and a prefix-cache hit or a recomputed (preempted) request reads int2 keys where the miss read
    the chunk's own full-precision ones. Wrong pages or a wrong recompute part at once, on a
    decided token. Returns how many tokens agreed."""
    n = next((i for i, (a, b) in enumerate(zip(ref["ids"], other["ids"])) if a != b), len(ref["ids"]))
    assert n == len(ref["ids"]) or ref["margins"][n] < margin, (
        f"parted at token {n} where the choice was decided (margin {ref['margins'][n]:.3f})", ref["ids"], other["ids"])
    return n


@pytest.mark.parametrize("fmt", ["tokens", "tiles"])
def test_smollm2_int2_output_alone_equals_batch_preemption_and_prefix_hit(tmp_path, fmt):
    """The real SmolLM2-135M (peaked logits, unlike the dummy models above), int2 with CUDA graphs and
    prefix caching: each request's greedy output alone equals its output in a batch that outgrows a
    small pool (the scheduler preempts and recomputes) and, for a prompt seen before, the output of
    the prefix-cache hit equals that of the miss."""
    from aphrodite_int2kv.quality import assets, engine_eval

    tok = engine_eval.hf_checkpoint(assets.model_path(), str(tmp_path / "smollm2"), max_len=2048)
    ids = tok.encode(open(assets.text_path("moby-dick"), encoding="utf-8").read()[200_000:260_000]).ids
    # short prompts, long outputs: the running requests outgrow the pool while they decode; the
    # first prompt spans whole pages of 128 tokens, so that running it again hits the prefix cache
    prompts = [ids[:520]] + [ids[i * 700: i * 700 + 120 + 24 * (i % 4)] for i in range(1, 12)]
    spec = dict(model=str(tmp_path / "smollm2"), prompts=prompts, max_tokens=320, blocks=64, format=fmt)
    res = run_python(SMOLLM2_CHILD.replace("sys.argv[1]", repr(json.dumps(spec))), timeout=420)
    line = next((l for l in res.stdout.splitlines() if l.startswith("RESULT ")), None)
    assert line, res.stdout[-3000:] + res.stderr[-6000:]
    got = json.loads(line[len("RESULT "):])
    if os.environ.get("INT2KV_TEST_ARTIFACTS"):     # the outputs, for the GPU record's reader
        with open(os.path.join(os.environ["INT2KV_TEST_ARTIFACTS"], f"smollm2_outputs_{fmt}.json"), "w") as f:
            json.dump(got, f)
    assert "int2 KV cache active" in res.stdout + res.stderr
    assert got["preempted_alone"] == 0, "a request alone must fit the pool"
    assert got["preempted"], "the batch was meant to outgrow the pool and be preempted"
    assert got["alone"][0]["cached"] == 0 and got["hit"]["cached"] > 0, (got["alone"][0]["cached"], got["hit"]["cached"])
    compared = _agree_where_decided(got["alone"][0], got["hit"])
    preempted = {tuple(p) for p in got["preempted"]}
    checked_preempted = 0
    for p, a, b in zip(spec["prompts"], got["alone"], got["batch"]):
        n = _agree_where_decided(a, b)
        compared += n
        checked_preempted += (tuple(p[:16]) in preempted) and n >= 8
    assert checked_preempted >= 1, "no preempted request agreed on enough tokens to compare"
    assert compared >= 64, compared
