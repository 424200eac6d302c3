"""benchmarks/serve_faults.py, the load and fault suite run on the H200 against `aphrodite run`:
its request plan and checks, its reading of the server's streams and metrics (in the formats the
real engine and prometheus_client write), and its server command parsed by the installed engine's
own argument parser."""

from __future__ import annotations

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
import serve_faults as S  # noqa: E402


def test_the_soak_plan_mixes_lengths_and_streams_reproducibly():
    plan = S.soak_plan(1000, 4, 32768)
    assert plan == S.soak_plan(1000, 4, 32768)
    assert sum(r["prompt_len"] == 32768 for r in plan) == 4
    assert all(16 <= r["prompt_len"] <= 2048 for r in plan if r["prompt_len"] != 32768)
    assert sum(r["stream"] for r in plan) == 500 and all(1 <= r["max_tokens"] <= 128 for r in plan)
    body = S.completion_body(plan[1])
    assert body["stream"] and body["stream_options"] == {"include_usage": True} and body["ignore_eos"]
    assert len(body["prompt"]) == plan[1]["prompt_len"] and all(S.PROMPT_IDS[0] <= t < S.PROMPT_IDS[1]
                                                                for t in body["prompt"])
    assert "stream_options" not in S.completion_body(plan[0])
    assert all(16 <= r["prompt_len"] <= 512 for r in S.soak_plan(200, 0, 0, short_max=512))


@pytest.mark.parametrize("pool", [4096, 6144, 16384, 65536, 200000])
def test_the_preemption_plan_outgrows_the_pool_while_decoding(pool):
    plan = S.preempt_plan(pool, 2048)
    totals = [r["prompt_len"] + r["max_tokens"] for r in plan]
    assert max(totals) <= min(2048 - 8, pool // 3)
    assert all(r["max_tokens"] >= 2 * r["prompt_len"] for r in plan)     # output-heavy
    assert 8 <= len(plan) <= 32 and len({r["seed"] for r in plan}) == len(plan)
    if len(plan) < 32:       # capped only for very large pools
        assert sum(totals) >= 2 * pool
        assert sum(r["prompt_len"] for r in plan) < pool    # the prompts alone fit: decoding outgrows it
    with pytest.raises(ValueError, match="--preempt-blocks"):
        S.preempt_plan(600, 2048)


def test_the_pool_is_the_engines_own_start_up_figure(engine):
    """Read from the line the installed engine's sizing code logs (its own format string)."""
    import inspect
    import re

    import aphrodite.v1.core.kv_cache_utils as kcu

    fmt = re.search(r'"(GPU KV cache size: %s tokens[^"]*)"', inspect.getsource(kcu)).group(1)
    line = fmt.replace("%s", f"{10922:,}", 1).replace("%s", "2,048").replace("%.2f", "2.67")
    assert S.engine_kv_tokens("INFO start\nINFO 17:50:46 " + line + "\n") == 10922
    with pytest.raises(RuntimeError, match="GPU KV cache size"):
        S.engine_kv_tokens("no such line")


def test_greedy_runs_part_at_a_near_tie_or_a_wide_gap(engine):
    """Divergence read from the engine's own completion logprobs model: where the runs part and
    the run alone's top-1 / top-2 gap there."""
    from aphrodite.entrypoints.openai.completion.protocol import CompletionLogProbs

    def run(tokens, tops):
        lp = CompletionLogProbs(tokens=tokens, top_logprobs=tops, token_logprobs=[0.0] * len(tokens))
        return json.loads(lp.model_dump_json())

    tops = [{"token_id:1": -0.1, "token_id:2": -2.0}, {"token_id:3": -0.70, "token_id:4": -0.72}]
    alone = run(["token_id:1", "token_id:3"], tops)
    assert S.first_divergence(alone, alone) == dict(at=-1, gap=None)
    near = S.first_divergence(alone, run(["token_id:1", "token_id:4"], tops))
    assert near["at"] == 1 and near["gap"] == pytest.approx(0.02)
    wide = S.first_divergence(alone, run(["token_id:2", "token_id:3"], tops))
    assert wide["at"] == 0 and wide["gap"] == pytest.approx(1.9)
    # per request: (status, completion) as completion() returns them, usage included
    usage = dict(prompt_tokens=5, completion_tokens=2)
    req = dict(prompt_len=5, max_tokens=2)

    def res(tokens):
        return 200, dict(run(tokens, tops), finish_reason="length", usage=usage)

    got = S.compare_runs([req] * 3, [res(["token_id:1", "token_id:3"])] * 3,
                         [res(["token_id:1", "token_id:3"]), res(["token_id:1", "token_id:4"]),
                          res(["token_id:2", "token_id:3"])], 0.05)
    assert got["outputs_equal"] == 1 and got["parted_at_wide_gap"] == 1 and got["errors"] == []


def _stream_lines(engine_version):
    """A streamed completion as the engine's own response models serialize it."""
    from aphrodite.entrypoints.openai.completion.protocol import (CompletionResponseStreamChoice,
                                                                  CompletionStreamResponse, UsageInfo)
    chunks = [CompletionStreamResponse(id="c", created=0, model="m", choices=[
        CompletionResponseStreamChoice(index=0, text=t, finish_reason=f)]) for t, f in
        (("a", None), ("b", None), ("c", "length"))]
    chunks.append(CompletionStreamResponse(id="c", created=0, model="m", choices=[],
                                           usage=UsageInfo(prompt_tokens=5, completion_tokens=3, total_tokens=8)))
    return [f"data: {c.model_dump_json(exclude_unset=True)}\n\n".encode() for c in chunks] + [b"data: [DONE]\n\n"]


def test_a_stream_is_read_and_checked(engine):
    got = S.parse_sse(_stream_lines(engine))
    assert got["text"] == "abc" and got["finish_reason"] == "length" and got["done"]
    assert got["usage"]["completion_tokens"] == 3
    req = dict(prompt_len=5, max_tokens=3, stream=True)
    assert S.check_completion(req, 200, got) == ""
    assert "tokens, wanted 4" in S.check_completion(dict(req, max_tokens=4), 200, got)
    assert "[DONE]" in S.check_completion(req, 200, dict(got, done=False))
    assert "finish_reason" in S.check_completion(req, 200, dict(got, finish_reason="stop"))
    assert "HTTP 500" in S.check_completion(req, 500, {"error": "x"})
    cut = S.parse_sse(_stream_lines(engine)[:2])      # a stream that broke off
    assert not cut["done"] and S.check_completion(req, 200, cut)


def test_metrics_are_read_by_the_engines_names(engine):
    """The metric names the suite reads are the installed engine's, and a counter is read under its
    own name from prometheus_client's exposition (which adds _total and _created)."""
    from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
    import aphrodite.v1.metrics.loggers as loggers

    source = open(loggers.__file__).read()
    for name in ("aphrodite:kv_cache_usage_perc", "aphrodite:num_requests_running",
                 "aphrodite:num_requests_waiting", "aphrodite:num_preemptions"):
        assert f'"{name}"' in source, name
    reg = CollectorRegistry()
    Counter("aphrodite:num_preemptions", "", ["model_name", "engine"], registry=reg).labels("m", "0").inc(3)
    Gauge("aphrodite:kv_cache_usage_perc", "", ["model_name", "engine"], registry=reg).labels("m", "0").set(0.25)
    got = S.parse_metrics(generate_latest(reg).decode())
    assert got == {"aphrodite:num_preemptions": 3.0, "aphrodite:kv_cache_usage_perc": 0.25}


def test_the_server_command_parses_with_the_engines_own_arguments(engine, tmp_path):
    """Every engine flag of the suite's `aphrodite run` exists in the installed engine (its own
    parser), int2 included once the plugin is registered; the hybrid gets its GDN flags."""
    import aphrodite_int2kv
    from aphrodite.engine.arg_utils import AsyncEngineArgs
    from aphrodite.utils.argparse_utils import FlexibleArgumentParser

    aphrodite_int2kv.register()
    for name, kv in (("serve-dense8b", "int2"), ("serve-hybrid27b", "auto")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps({"text_config": {}} if "hybrid" in name else {}))
        cmd = S.server_command(str(tmp_path / name), kv, 8011, 4096,
                               ["--num-gpu-blocks-override", "64", "--block-size", "128"],
                               load_format="auto" if kv == "auto" else "dummy", gpu_mem=0.4)
        args = cmd[cmd.index("run") + 1:]
        engine_args = ["--model", args[0]]
        rest = args[1:]
        i = 0
        while i < len(rest):
            if rest[i] in ("--host", "--port"):     # the frontend's, not the engine's
                i += 2
                continue
            engine_args.append(rest[i])
            i += 1
        parsed = AsyncEngineArgs.add_cli_args(FlexibleArgumentParser()).parse_args(engine_args)
        assert parsed.kv_cache_dtype == kv and parsed.num_gpu_blocks_override == 64 and parsed.block_size == 128
        assert parsed.enable_prefix_caching is False and parsed.gpu_memory_utilization == 0.4
        assert parsed.load_format == ("auto" if kv == "auto" else "dummy")
        # Triton for bf16 / fp8; with int2 for the layers int2 does not take (int2 layers keep ours)
        assert str(parsed.attention_backend) == "TRITON_ATTN"
        assert parsed.language_model_only == (name == "serve-hybrid27b")


def test_memory_drift_leaves_the_warm_up_out():
    samples = [(t, 1000.0 + (500 if t < 2 else 0) + t, 300.0 + t / 10) for t in range(10)]
    d = S.drift(samples)
    assert d["gpu_mib_first"] == 1002.0 and d["gpu_mib_drift"] == 7.0 and d["samples"] == 10
    assert d["host_mib_drift"] == pytest.approx(0.7)
    assert S.drift([]) == {}


def test_the_model_dir_cuts_the_vocabulary_to_the_tiny_tokenizer(tmp_path):
    (tmp_path / "qwen3").mkdir()
    (tmp_path / "qwen3" / "tokenizer.json").write_text("{}")
    (tmp_path / "qwen3" / "config.json").write_text('{"eos_token_id": 2}')
    path = S.model_dir_for("dense8b", str(tmp_path))
    cfg = json.load(open(os.path.join(path, "config.json")))
    assert cfg["vocab_size"] == S.VOCAB and cfg["num_key_value_heads"] == 8 and cfg["eos_token_id"] == 2
    assert os.path.exists(os.path.join(path, "tokenizer.json"))


def test_layers_keep_the_hybrids_pattern_and_shapes(tmp_path):
    (tmp_path / "qwen35").mkdir()
    (tmp_path / "qwen35" / "config.json").write_text('{"text_config": {"num_hidden_layers": 4}}')
    cfg = json.load(open(os.path.join(S.model_dir_for("hybrid27b", str(tmp_path), layers=16), "config.json")))
    text = cfg["text_config"]
    assert text["num_hidden_layers"] == 16 and len(text["layer_types"]) == 16
    assert text["layer_types"].count("full_attention") == 4 and text["layer_types"][3] == "full_attention"
    assert text["head_dim"] == 256 and text["num_key_value_heads"] == 4 and text["vocab_size"] == S.VOCAB
    with pytest.raises(SystemExit, match="multiple of 4"):
        S.model_dir_for("hybrid27b", str(tmp_path), layers=10)


def test_the_preemption_server_runs_no_more_sequences_than_its_pool_has_state_blocks():
    assert S.preempt_max_seqs(64) == 32 and S.preempt_max_seqs(40) == 20 and S.preempt_max_seqs(1000) == 32
    assert S.preempt_max_seqs(1) == 1
