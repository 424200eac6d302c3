"""The engine-path eval's scoring (quality/engine_eval.py), on CPU: what the GPU run's table is made of."""

from __future__ import annotations

import math

import pytest

from aphrodite_int2kv.quality import engine_eval as E
from aphrodite_int2kv.quality.longctx import order_items


def test_perplexity_and_its_late_half():
    lps = [[-1.0, -2.0, -3.0], [-1.0, -1.0, -1.0]]
    assert E.perplexity(lps) == pytest.approx(math.exp(9 / 6))
    # positions 2.. of each window (token i + 1 for lps[w][i]): -2, -3, -1, -1
    assert E.perplexity(lps, late_from=2) == pytest.approx(math.exp(7 / 4))
    assert math.isnan(E.perplexity([[float("nan"), -1.0]]))      # a NaN is reported, never averaged away
    with pytest.raises(ValueError):
        E.perplexity([[]])


def test_greedy_agreement_counts_tokens_before_the_first_difference():
    assert E.first_divergence([1, 2, 3, 4], [1, 2, 9, 4]) == 2
    assert E.first_divergence([1, 2], [1, 2]) == 2
    assert E.first_divergence([5], [6]) == 0


def test_answers_are_the_final_answer_only():
    assert E.extract_answer(" 4821.\nQuestion: 1234") == "4821"
    assert E.extract_answer(" fox, owl and the goat.\nThe next") == "fox, owl, goat"
    assert E.score_answer("order", E.extract_answer(" fox, then the owl and a goat"), "fox, owl, goat")
    assert E.score_answer("order", "fox, owl, goat, and", "fox, owl, goat")
    assert not E.score_answer("order", "owl, fox, goat", "fox, owl, goat")
    assert not E.score_answer("order", "fox, owl", "fox, owl, goat")
    assert E.score_answer("needle", "4821", "4821") and not E.score_answer("needle", "4822", "4821")
    kind, prompt, answer = order_items(1, 4, 2)[0]
    assert kind == "order" and len(answer.split(", ")) == 4 and prompt.endswith("The visitors were the")
    assert all(f"visitor was the {a}." in prompt for a in answer.split(", "))


def test_summary_rows_compare_against_bf16():
    ref = {"ppl": [[-1.0, -1.0]], "greedy": [[1, 2, 3]], "greedy_lp": [[-0.1, -0.2, -0.3]], "forced": None,
           "answers": ["1", "2"], "kinds": ["needle", "position"], "wanted": ["1", "3"]}
    other = {"ppl": [[-1.1, -1.3]], "greedy": [[1, 2, 4]], "forced": [[-0.2, -0.2, -0.6]],
             "answers": ["1", "3"], "kinds": ["needle", "position"], "wanted": ["1", "3"]}
    rows = E.summarize({"bf16": ref, "int2": other, "fp8": {"error": "worker exited 1"}}, late_from=2)
    by = {r["kv"]: r for r in rows}
    assert by["bf16"]["ppl_delta"] == 0 and by["bf16"]["answers_right"] == 0.5
    assert by["int2"]["ppl_delta"] == pytest.approx(math.exp(1.2) / math.exp(1.0) - 1)
    assert by["int2"]["ppl_late_delta"] == pytest.approx(math.exp(1.3) / math.exp(1.0) - 1)
    assert by["int2"]["agree_tokens"] == [2]
    assert by["int2"]["logprob_gap"] == pytest.approx((0.1 + 0.0 + 0.3) / 3)
    assert by["int2"]["answers_equal_bf16"] == 0.5 and by["int2"]["answers_right"] == 1.0
    assert by["fp8"]["error"]
    table = E.markdown(rows)
    assert "| int2 | 3.32 | +22.1 % |" in table and "error: worker exited 1" in table


def test_gguf_names_map_onto_the_llama_checkpoint():
    assert E.hf_name("token_embd.weight") == "model.embed_tokens.weight"
    assert E.hf_name("blk.12.attn_k.weight") == "model.layers.12.self_attn.k_proj.weight"
    assert E.hf_name("blk.0.ffn_down.weight") == "model.layers.0.mlp.down_proj.weight"
    with pytest.raises(ValueError, match="unexpected GGUF tensor"):
        E.hf_name("blk.0.attn_qkv.weight")


def test_the_engines_own_kv_dtypes_can_be_compared(engine):
    """--kv takes any KV-cache dtype the installed engine offers by its own name (its CacheDType):
    the turboquant presets and per-token-head caches of the side-by-side; bf16 and fp8 run on the
    engine's Triton backend, turboquant on the backend the engine picks for it."""
    offered = E.engine_kv_dtypes()
    assert {"auto", "fp8", "turboquant_k8v4", "turboquant_3bit_nc"} <= set(offered)
    assert E.kv_config("bf16") == ("auto", {}) and E.kv_config("int2-tokens") == ("int2", {"APHRODITE_INT2KV_FORMAT": "tokens"})
    assert E.kv_config("turboquant_k8v4") == ("turboquant_k8v4", {})
    with pytest.raises(SystemExit, match="turboquant_4bit_nc"):
        E.kv_config("int3_made_up")
    assert E.baseline_backend("fp8") == {"attention_config": {"backend": "TRITON_ATTN"}}
    assert E.baseline_backend("auto") == E.baseline_backend("fp8")
    assert E.baseline_backend("turboquant_k8v4") == {}
    # int2: the selection is for the layers int2 does not take (a Gemma model's local layers)
    assert E.baseline_backend("int2") == E.baseline_backend("fp8")


def test_a_refusing_dtype_reports_the_engines_reason(tmp_path):
    log = tmp_path / "worker.log"
    log.write_text("INFO starting\nTraceback (most recent call last):\n  File \"x.py\", line 1\n"
                   "NotImplementedError: TurboQuant KV cache is not supported for hybrid models.\n")
    assert E.failure_reason(str(log)) == "NotImplementedError: TurboQuant KV cache is not supported for hybrid models."
    log.write_text("killed\n")
    assert E.failure_reason(str(log)) == "killed"
    assert E.failure_reason(str(tmp_path / "none.log")) == "no log"


def test_the_suite_is_scored_from_the_engines_prompt_logprobs(engine):
    """eval --engine --suite: each target position's own token with its rank (prompt_logprobs=1),
    in the engine's own Logprob objects: rank 1 is a top-1 hit, the NLL sums, an item is answered
    exactly when every target is top-1; a position without its token is a miss with NaN NLL."""
    from aphrodite.logprobs import Logprob

    ids = [5, 6, 7, 8]
    plp = [None, {6: Logprob(-0.1, rank=1)}, {7: Logprob(-2.0, rank=3), 9: Logprob(-0.5, rank=1)},
           {8: Logprob(-0.3, rank=1)}]
    got = E.score_prompt_logprobs(plp, ids, [1, 2, 3])
    assert got == dict(n=3, top1=2, nll=pytest.approx(2.4), exact=False)
    assert E.score_prompt_logprobs(plp, ids, [1, 3])["exact"]
    assert math.isnan(E.score_prompt_logprobs([None, {}], [5, 6], [1])["nll"])


def test_the_plan_carries_the_suite_with_its_scored_positions(tmp_path):
    """make_plan(suite=...): the same items the harness scores, as token ids and the positions of
    the tokens to score (the copy's second half read back; the pass key's digits)."""
    from aphrodite_int2kv.quality import assets, longctx, smollm

    cfg, sd, tok = smollm.load(assets.model_path())
    with open(assets.text_path("moby-dick"), encoding="utf-8") as f:
        text = f.read()
    plan = E.make_plan(tok, text, windows=1, tokens=256, greedy_prompts=1, longctx_items=1,
                       suite=dict(distances=[512], passages=1, far=[], passkeys=["1024:0.5"]))
    copy, key = plan["suite"]
    assert copy["label"] == "copy@512" and key["label"] == "passkey1024@0.50"
    first = copy["ids"][256:512]
    assert [copy["ids"][t] for t in copy["targets"]] == first[8:]
    digits = tok.decode([key["ids"][t] for t in key["targets"]])
    assert digits.isdigit() and len(digits) == 5 and tok.decode(key["ids"]).count(digits) == 3
    assert E.make_plan(tok, text, windows=1, tokens=256, greedy_prompts=1, longctx_items=1)["suite"] == []


def test_the_checkpoint_admits_the_plans_longest_prompt(engine, tmp_path):
    """The engine's own config check (EngineArgs.create_engine_config) takes the max_model_len a
    worker asks for a suite with 8K far-perplexity windows once run_engine has let the checkpoint
    admit it; SmolLM2's own 8,192 positions refuse it (what stopped the first GPU run of
    `eval --engine --suite`)."""
    from aphrodite.engine.arg_utils import EngineArgs

    from aphrodite_int2kv.quality import assets

    E.hf_checkpoint(assets.model_path(), str(tmp_path))
    plan = {"suite": [{"ids": [1] * 8192}, {"ids": [1] * 4096}]}
    need = E.engine_max_len(plan)
    assert need > 8192

    def config():
        return EngineArgs(model=str(tmp_path), max_model_len=need, skip_tokenizer_init=True,
                          dtype="bfloat16").create_engine_config()

    with pytest.raises(Exception, match="max_model_len|max_position_embeddings|8192"):
        config()
    E.allow_positions(str(tmp_path), need)
    assert config().model_config.max_model_len == need
