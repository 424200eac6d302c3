"""Helpers the GPU benchmarks share (benchmarks/decode_attention.py), checked on CPU."""
import math

import os

import pytest

from benchmarks.decode_attention import CONFIG_SETS, expand_configs, ragged_lengths, window_pages


def test_named_shape_sets_cover_every_ratio_and_kv_head_count():
    """--configs ratios-d128 / ratios-d256: ratios 1-32 at 1, 2, 4, 8 KV heads, each shape once;
    sets and explicit shapes mix in order; a shape whose heads do not divide is refused."""
    shapes = expand_configs("ratios-d128")
    assert len(shapes) == 32 and {D for _, _, D in shapes} == {128}
    assert {(hq // hkv, hkv) for hq, hkv, _ in shapes} == {(r, h) for r in (1, 2, 4, 8, 12, 16, 24, 32)
                                                           for h in (1, 2, 4, 8)}
    assert expand_configs("32/4/128,ratio8")[0] == (32, 4, 128) and len(expand_configs("ratio8,32/4/128")) == 2
    tp = expand_configs("tp")
    assert all(hq % hkv == 0 for hq, hkv, _ in tp) and len(tp) == len(CONFIG_SETS["tp"].split(","))
    with pytest.raises(SystemExit, match="not a multiple"):
        expand_configs("12/5/128")


@pytest.mark.parametrize("batch,max_len,R,wbs", [(3, 1000, 128, 48), (2, 100, 128, 48), (1, 48, 1, 48), (4, 4096, 96, 48)])
def test_window_pages_give_the_last_R_positions_their_own_pages(batch, max_len, R, wbs):
    """Every logical window block holding one of a sequence's last R positions points at a page of
    its own (no two sequences or blocks share one, page 0 excluded); blocks more than one before
    them point at page 0."""
    k_win, v_win, table, r = window_pages(batch, max_len, 2, 64, R, wbs, device="cpu")
    assert r == R and k_win.shape == v_win.shape and k_win.shape[1:] == (wbs, 2, 64)
    nlog = math.ceil(max_len / wbs)
    assert tuple(table.shape) == (batch, nlog)
    first = max(0, max_len - R) // wbs          # first logical block holding a window position
    used = table[:, first:]
    assert (used >= 1).all() and (used < k_win.shape[0]).all()
    assert used.flatten().unique().numel() == used.numel()
    assert (table[:, :max(0, first - 1)] == 0).all()


@pytest.mark.parametrize("S,B", [(32768, 11), (4096, 2), (131072, 64), (1000, 1)])
def test_ragged_lengths_spread_around_the_mean(S, B):
    """decode_ab --ragged / e2e_throughput --mixed: B lengths from S/8 to 15S/8, evenly spaced, mean
    S (within rounding), the same for the same (S, B), shuffled."""
    lens = ragged_lengths(S, B)
    assert len(lens) == B and lens == ragged_lengths(S, B)
    assert abs(sum(lens) / B - S) <= 1
    if B > 1:
        assert min(lens) == round(S / 8) and max(lens) == round(15 * S / 8)
        steps = sorted(lens)
        assert max(b - a for a, b in zip(steps, steps[1:])) - min(b - a for a, b in zip(steps, steps[1:])) <= 1


def test_every_benchmark_entry_point_answers_help():
    """benchmarks/ is a small suite of entry points: each one says how to run it."""
    import pathlib
    import subprocess
    import sys

    root = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"
    scripts = sorted(p for p in root.iterdir() if p.suffix in (".py", ".sh"))
    assert 4 <= len(scripts) <= 13, [p.name for p in scripts]
    for p in scripts:
        cmd = ["bash", str(p), "--help"] if p.suffix == ".sh" else [sys.executable, str(p), "--help"]
        res = subprocess.run(cmd, cwd=root.parent, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0 and len(res.stdout) > 80, (p.name, res.stdout[-500:], res.stderr[-1500:])


@pytest.mark.parametrize("fmt,least", [("tiles", 4.95), ("tokens", 5.8)])
def test_dtype_capacity_sizes_every_engine_dtype_by_the_engines_arithmetic(engine, tmp_path, fmt, least):
    """benchmarks/engine_capacity.py dtypes: a row for every KV dtype the engine offers; TurboQuant's
    tokens follow its slot size with 4 of 36 layers in bf16, int2 stays at its format's capacity
    (tiles, the default: 4.98x at 32K; tokens: 5.87x); on the layout-based API (0.24) it refuses
    with the reason instead of sizing the wrong pages."""
    import json
    import pathlib
    import subprocess
    import sys

    from aphrodite_int2kv.engine.kv_api import shape_based_kv_api

    root = pathlib.Path(__file__).resolve().parents[1]
    out = tmp_path / "cap.json"
    res = subprocess.run([sys.executable, "benchmarks/engine_capacity.py", "dtypes", "--out", str(out)], cwd=root,
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, "APHRODITE_INT2KV_FORMAT": fmt})
    if not shape_based_kv_api():
        assert res.returncode != 0 and "customize_spec" in res.stderr and "0.21" in res.stderr
        return
    assert res.returncode == 0, res.stderr[-2000:]
    rows = {r["kv_cache_dtype"]: r for r in json.load(open(out))}
    import aphrodite_int2kv
    from aphrodite_int2kv.quality.engine_eval import engine_kv_dtypes

    aphrodite_int2kv.register()
    # and with the tile format a row with 4-bit keys (APHRODITE_INT2KV_K_BITS=4): 109 instead of 93 B per token and head
    # and a row with prefix caching off (the recent window keeps no pages for prefix-hit points)
    # (and with tiles, pages of 192 tokens: --block-size 192)
    assert set(rows) == (set(engine_kv_dtypes()) | ({"int2-k4", "int2-block-192"} if fmt == "tiles" else set())
                         | {"int2-no-prefix-caching"})
    assert rows["auto"]["vs_bf16"] == 1.0 and rows["fp8"]["vs_bf16"] == 2.0 and rows["int2"]["vs_bf16"] >= least
    assert rows["int2"]["vs_bf16"] < rows["int2-no-prefix-caching"]["vs_bf16"] < 1.05 * rows["int2"]["vs_bf16"]
    assert "prefix caching off" in rows["int2-no-prefix-caching"]["note"] and "on (" in rows["int2"]["note"]
    if fmt == "tiles":
        assert 4.2 < rows["int2-k4"]["vs_bf16"] < 4.3 and rows["int2-k4"]["int2_format"] == "tiles, K_BITS=4"
        # window pages of 32 in a page of 192 pad less than 16 in 128: past 5x with prefix caching on
        assert rows["int2"]["vs_bf16"] < 5.0 < rows["int2-block-192"]["vs_bf16"]
        assert "pages of 192 tokens" in rows["int2-block-192"]["note"]
    from aphrodite.model_executor.layers.quantization.turboquant.config import TurboQuantConfig

    bf16_bytes = 2 * 128 * 2          # K and V of one head, one token
    for kv in [k for k in rows if k.startswith("turboquant_")]:
        slot = TurboQuantConfig.from_cache_dtype(kv, 128).slot_size_aligned
        assert rows[kv]["vs_bf16"] == pytest.approx(36 * bf16_bytes / (4 * bf16_bytes + 32 * slot), rel=2e-3), kv


@pytest.mark.parametrize("model,least,block,local", [("gemma3-27b", 3.3, 256, 48), ("gpt-oss-20b", 4.5, 320, 64)])
def test_sliding_window_capacity_by_the_engines_arithmetic_on_both_engine_generations(engine, tmp_path, model, least,
                                                                                      block, local):
    """benchmarks/engine_capacity.py dtypes --model gemma3-27b / gpt-oss-20b at 128K (every layer
    built as the model builds it, gpt-oss's int2 layers with their attention sinks; both KV APIs):
    int2 on the global layers gains over bf16 and stays under the bound where the global layers
    cost nothing; fp8 local layers gain more."""
    import json
    import pathlib
    import subprocess
    import sys

    root = pathlib.Path(__file__).resolve().parents[1]
    out = tmp_path / "gemma.json"
    res = subprocess.run([sys.executable, "benchmarks/engine_capacity.py", "dtypes", "--model", model,
                          "--context", "131072", "--out", str(out)], cwd=root, capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    rows = {r["kv_cache_dtype"]: r for r in json.load(open(out))}
    r = {k: v["vs_bf16"] for k, v in rows.items()}
    assert r["auto"] == 1.0 and r["fp8"] == 2.0
    assert least < r["int2"] < r["bound:bf16-local"] and r["int2"] < r["int2+fp8-local"] < r["bound:fp8-local"], r
    assert rows["int2"]["int2_block"] == block and rows["int2"]["local_block"] == local
    assert rows["int2+fp8-local"]["local_kv_cache_dtype"] == "fp8" and rows["int2"]["local_kv_cache_dtype"] == "auto"
    # 4-bit keys: fewer tokens than 3-bit keys with either local dtype, more with fp8 local layers
    assert r["int2-k4"] < r["int2"] and r["int2-k4"] < r["int2-k4+fp8-local"] < r["int2+fp8-local"], r
    assert rows["int2-k4+fp8-local"]["local_kv_cache_dtype"] == "fp8"
    assert rows["int2-k4+fp8-local"]["int2_format"] == "tiles, K_BITS=4"


def test_e2e_concurrency_list_takes_the_dtypes_own_maximum():
    import pathlib
    import sys

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
    from e2e_throughput import concurrencies

    assert concurrencies("1,11,max", 69.85) == [1, 11, 69]
    assert concurrencies("1,max", 0.4) == [1] and concurrencies("8", None) == [8]
    with pytest.raises(SystemExit, match="reported no maximum"):
        concurrencies("max", None)
    with pytest.raises(SystemExit, match="auto"):
        concurrencies("bf16max", 11.6)


def _e2e():
    import pathlib
    import sys

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
    import e2e_throughput
    return e2e_throughput


def test_e2e_timings_count_only_the_steps_where_every_request_decodes():
    """Request a prefills in 1 s, b in 2 s (a decodes meanwhile); then 0.1 s steps of both until a
    finishes at 6 tokens: the decode rate is over the 4 steps from b's first token to a's end."""
    trace = [(1.0, {"a": 1, "b": 0}, set()), (2.0, {"a": 2, "b": 1}, set())]
    for k in range(1, 5):
        trace.append((2.0 + 0.1 * k, {"a": 2 + k, "b": 1 + k}, {"a"} if k == 4 else set()))
    trace.append((2.5, {"a": 6, "b": 6}, {"a", "b"}))
    t = _e2e().timings(trace, prompt_tokens=2000)
    assert t["ttft_first_s"] == 1.0 and t["batch_ttft_s"] == 2.0 and t["prefill_tok_s"] == 1000.0
    assert t["decode_steps"] == 4 and t["decode_tok_s"] == pytest.approx(8 / 0.4, rel=1e-3)
    assert t["step_ms"] == pytest.approx(100.0)
    with pytest.raises(ValueError, match="raise --decode"):     # a finished before b started decoding
        _e2e().timings([(1.0, {"a": 1, "b": 0}, {"a"}), (2.0, {"a": 1, "b": 1}, {"a", "b"})], 10)
    with pytest.raises(ValueError, match="no token"):
        _e2e().timings([(1.0, {"a": 1, "b": 0}, {"a"})], 10)


def test_e2e_children_get_every_flag_but_the_ones_run_each_sets():
    argv = ["--kv", "auto,int2", "--context=32768", "--concurrency=1,bf16max", "--parallel", "3",
            "--kv-gib", "12", "--budget-s=900", "--out", "r.jsonl"]
    assert _e2e().child_argv(argv) == ["--context=32768", "--kv-gib", "12", "--out", "r.jsonl"]


def test_e2e_group_waits_for_every_engine_then_takes_turns(tmp_path):
    e2e = _e2e()
    g = e2e.Group(str(tmp_path), 2)
    g.built()
    g.built()            # once per process
    assert len(list(tmp_path.iterdir())) == 1
    with pytest.raises(SystemExit, match="not built"):
        g.wait_all_built(timeout_s=0)
    (tmp_path / "built.other").touch()
    g.wait_all_built(timeout_s=0)
    with g.gpu_turn():
        assert (tmp_path / "gpu.lock").exists()
    with pytest.raises(SystemExit, match="--kv-gib"):
        e2e.run_each(type("A", (), dict(kv="auto,int2", concurrency="1", parallel=2, kv_gib=0))())


def test_e2e_engine_log_catches_what_a_spawned_process_writes(tmp_path):
    import os
    import subprocess
    import sys

    log = tmp_path / "engine.log"
    with _e2e().output_to(str(log)):
        subprocess.run([sys.executable, "-c", "import sys; sys.stderr.write('GPU KV cache size: 7 tokens\\n')"])
        os.write(1, b"from this process\n")      # the engine's logger writes to stdout
    os.write(1, b"after\n")
    assert log.read_text().splitlines() == ["GPU KV cache size: 7 tokens", "from this process"]



def test_e2e_turboquant_boundary_layers_never_pick_flash_attn_where_its_ops_are_missing(engine):
    """On an install without FlashAttention's ops (the GPU bundle), the TurboQuant rows take
    FLASH_ATTN out of the CUDA backend priorities (the rest of keep_turboquant_off_missing_flash_attn
    needs the CUDA platform: the H200 rows show it)."""
    from aphrodite.v1.attention.backends.registry import AttentionBackendEnum as B

    listed = [B.FLASH_ATTN, B.FLASHINFER, B.TRITON_ATTN, B.FLEX_ATTENTION, B.TURBOQUANT]
    calls = []

    def priorities(*args, **kwargs):
        calls.append((args, kwargs))
        return listed

    pick = _e2e().without_backend(priorities, B.FLASH_ATTN)
    assert pick(False, "cap", kv_cache_dtype="auto") == listed[1:]
    assert calls == [((False, "cap"), {"kv_cache_dtype": "auto"})] and B.FLASH_ATTN in listed


def test_e2e_sdpa_varlen_is_causal_attention_from_the_end_of_each_sequence():
    """sdpa_varlen, TurboQuant's prefill attention where FlashAttention is missing, against the
    attention written out: packed sequences, a chunk after cached keys (bottom-right causal), GQA."""
    import torch

    torch.manual_seed(0)
    Hq, Hk, D = 4, 2, 16
    lq, lk = [5, 3, 4], [5, 9, 4]           # the second: a chunk of 3 after 6 cached keys
    q = torch.randn(sum(lq), Hq, D)
    k, v = torch.randn(sum(lk), Hk, D), torch.randn(sum(lk), Hk, D)
    cq = torch.tensor([0, 5, 8, 12], dtype=torch.int32)
    ck = torch.tensor([0, 5, 14, 18], dtype=torch.int32)
    got = _e2e().sdpa_varlen(q, k, v, cq, ck, 5, 9, softmax_scale=0.3, causal=True)
    for i in range(3):
        qs, ks, vs = q[cq[i]:cq[i + 1]], k[ck[i]:ck[i + 1]], v[ck[i]:ck[i + 1]]
        for h in range(Hq):
            s = 0.3 * qs[:, h] @ ks[:, h // 2].T
            allowed = torch.arange(lk[i])[None, :] <= torch.arange(lq[i])[:, None] + (lk[i] - lq[i])
            want = torch.softmax(s.masked_fill(~allowed, float("-inf")), dim=-1) @ vs[:, h // 2]
            torch.testing.assert_close(got[cq[i]:cq[i + 1], h], want, atol=1e-5, rtol=1e-5)


def test_window_capacity_gives_our_budget_more_tokens_than_the_engines(engine, tmp_path):
    """benchmarks/engine_capacity.py window: int2 with its recent window by the engine's own
    arithmetic; our window budget never holds fewer tokens than the engine's sliding-window one,
    and both stay above bf16."""
    import json
    import pathlib
    import subprocess
    import sys

    root = pathlib.Path(__file__).resolve().parents[1]
    out = tmp_path / "win.json"
    res = subprocess.run([sys.executable, "benchmarks/engine_capacity.py", "window", "--out", str(out)], cwd=root,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    rows = json.load(open(out))
    assert len(rows) == 8
    by = {(r["window"], r["max_num_batched_tokens"], r["budget"]): r["ratio_vs_bf16"] for r in rows}
    for (R, mnbt, budget), ratio in by.items():
        assert ratio > 1.0
        if budget == "ours":
            assert ratio >= by[(R, mnbt, "engine")], (R, mnbt)
    assert by[(128, 16384, "ours")] > by[(128, 16384, "engine")]     # the engine budgets a whole chunk per request


@pytest.mark.parametrize("fmt,block,least", [("tiles", 2368, 4.5), ("tokens", 2560, 4.9)])
def test_hybrid_capacity_of_every_engine_dtype_by_the_engines_arithmetic(engine, tmp_path, fmt, block, least):
    """benchmarks/engine_capacity.py dtypes --model hybrid27b: the engine refuses TurboQuant on a
    hybrid (its own NotImplementedError, a row's error); every other dtype is sized with its
    attention page raised to the Gated DeltaNet state page, so capacity follows the attention
    bytes per token only roughly (fp8 below 2x), and int2 keeps >= 4.5x at 32K (tiles, the
    default; tokens >= 4.9x)."""
    import json
    import pathlib
    import subprocess
    import sys

    from aphrodite_int2kv.engine.kv_api import shape_based_kv_api

    root = pathlib.Path(__file__).resolve().parents[1]
    out = tmp_path / "cap.json"
    res = subprocess.run([sys.executable, "benchmarks/engine_capacity.py", "dtypes", "--model", "hybrid27b",
                          "--out", str(out)], cwd=root, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "APHRODITE_INT2KV_FORMAT": fmt})
    if not shape_based_kv_api():
        assert res.returncode != 0 and "customize_spec" in res.stderr
        return
    assert res.returncode == 0, res.stderr[-2000:]
    rows = {r["kv_cache_dtype"]: r for r in json.load(open(out))}
    tq = [k for k in rows if k.startswith("turboquant_")]
    assert tq and all("not supported for hybrid" in rows[k]["error"] for k in tq)
    assert rows["auto"]["attention_block_size"] == 400          # the H200 engine's bf16 page on this model
    assert rows["int2"]["attention_block_size"] == block and rows["int2"]["vs_bf16"] >= least
    if fmt == "tiles":   # 4-bit keys: fewer tokens in the same pages
        assert 3.9 < rows["int2-k4"]["vs_bf16"] < rows["int2"]["vs_bf16"]
    assert 1.85 < rows["fp8"]["vs_bf16"] < 2.0
