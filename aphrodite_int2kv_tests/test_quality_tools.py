"""eval / make-rotation / calibrate on the real SmolLM2-135M (fetched once into a cache shared by
CI runs on the same machine) and real text; rotation files loaded the way the engine loads them."""

from __future__ import annotations

import json

import pytest
import torch

from aphrodite_int2kv.cli import main as cli
from aphrodite_int2kv.int2.format import Int2ConfigError
from aphrodite_int2kv.int2.rotation import load_rotation_file, orthogonality_error


def _config(tmp_path, nested=False, **over):
    cfg = dict(num_attention_heads=8, num_key_value_heads=2, hidden_size=1024, num_hidden_layers=6,
               layer_types=["linear_attention", "full_attention"] * 3)
    cfg.update(over)
    doc = {"text_config": cfg} if nested else cfg
    (tmp_path / "config.json").write_text(json.dumps(doc))
    return str(tmp_path)


@pytest.mark.parametrize("nested", [False, True])
def test_make_rotation_writes_files_the_engine_loads(tmp_path, nested, monkeypatch, capsys):
    model = _config(tmp_path, nested=nested)
    out = tmp_path / "rot"
    assert cli(["make-rotation", "--model", model, "--out", str(out)]) == 0
    k = load_rotation_file(str(out / "k_rotation.pt"), 128, 2, [1, 3, 5])
    assert set(k) == {1, 3, 5} and orthogonality_error(k[3]["rotation"]) < 1e-5
    with pytest.raises(Int2ConfigError, match="no entry for attention layer"):
        load_rotation_file(str(out / "k_rotation.pt"), 128, 2, [0])   # GDN layers get no rotation
    # the engine's impl picks the file's matrix for its layer
    pytest.importorskip("aphrodite")
    monkeypatch.setenv("APHRODITE_INT2KV_K_ROTATION", str(out / "k_rotation.pt"))
    monkeypatch.setenv("APHRODITE_INT2KV_V_ROTATION", str(out / "v_rotation.pt"))
    from aphrodite_int2kv.engine.backend import Int2AttentionImpl

    impl = Int2AttentionImpl(8, 128, 128 ** -0.5, 2, None, None, "int2")
    layer = type("L", (), {"layer_name": "language_model.model.layers.3.self_attn.attn"})()
    _, rk, rv = impl._rotations(layer, "cpu")
    assert torch.allclose(rk, k[3]["rotation"])


def test_make_rotation_errors(tmp_path, capsys):
    assert cli(["make-rotation", "--model", str(tmp_path)]) == 2
    assert "has no config.json" in capsys.readouterr().err
    _config(tmp_path, hidden_size=8 * 40)        # head_dim 40: no Hadamard of that size
    assert cli(["make-rotation", "--model", str(tmp_path), "--out", str(tmp_path)]) == 2
    assert "head_dim 40" in capsys.readouterr().err


@pytest.fixture(scope="module")
def small_eval():
    """One 384-token window of Moby-Dick through fp, plain int2 and int2 with windows + centering."""
    from aphrodite_int2kv.cli.eval import evaluate
    from aphrodite_int2kv.quality.schemes import Scheme

    return evaluate([Scheme("fp", "fp"), Scheme("naive 2-bit per token", "naive"),
                     Scheme("int2 hadamard G32", "int2", group_size=32),
                     Scheme("int2 G32 windows+center", "int2", group_size=32, sink=4, recent=128, center=True)],
                    tokens=384, windows=1, progress=False)


def test_eval_on_the_real_model_separates_schemes(small_eval):
    fp, naive, plain, best = small_eval
    assert 15 < fp["ppl"] < 150, fp                 # a trained LM on English prose, not noise
    assert naive["rel_increase"] > 3                  # per-token 2-bit without rotation collapses
    assert 0.3 < plain["rel_increase"] < naive["rel_increase"]
    assert best["rel_increase"] < plain["rel_increase"] / 3
    assert all(r["fp_ppl"] == fp["ppl"] and r["tokens"] == 384 for r in small_eval)


def test_eval_scores_int2_keys_with_the_decode_query_rounding():
    """Scheme(query_codes=True): the int2 keys after the uncentered first ones are scored as the
    folded decode tile scores them (query rounded in the K-rotated basis, meeting the centered key,
    q . offset exact): the same as reference.attend's folded scores on the keys the transform
    reconstructs, and not the same as the exact query's."""
    from aphrodite_int2kv.int2 import reference as R
    from aphrodite_int2kv.int2.rotation import hadamard
    from aphrodite_int2kv.quality.schemes import KVTransform, Scheme, attention_fn

    torch.manual_seed(3)
    T, Hq, Hkv, D, skip = 48, 6, 2, 64, 16
    k = torch.randn(T, Hkv, D) + 4.0 * torch.randn(Hkv, D)
    v, q = torch.randn(T, Hkv, D), torch.randn(T, Hq, D)
    scheme = Scheme("s", "int2", center=True, center_skip=skip, center_from_cache=True, query_codes=True)
    tf = KVTransform(scheme, D, Hkv, 1)
    out = attention_fn(scheme, tf, D ** -0.5)(0, q, k, v)
    kq, vq = tf(0, k, v)
    H = hadamard(D)
    q_hat = R.query_codes(q[-1:] @ H, D ** -0.5) @ H.T
    ref = R.attend(q[-1:], kq, vq, D ** -0.5, q_folded=q_hat, folded_keys=(skip, T), folded_center=tf.used_offsets[0][0])
    torch.testing.assert_close(out[-1:], ref, atol=1e-5, rtol=0)
    # the scores use the offset of the layer they are asked for, whatever layer was encoded last
    two = KVTransform(scheme, D, Hkv, 2)
    two(0, k, v)
    two(1, k + 3.0, v)
    torch.testing.assert_close(two.folded_scores(0, q, kq, D ** -0.5), tf.folded_scores(0, q, kq, D ** -0.5))
    with pytest.raises(RuntimeError, match="before the transform encoded that layer's keys"):
        KVTransform(scheme, D, Hkv, 2).folded_scores(1, q, kq, D ** -0.5)
    exact = attention_fn(Scheme("s", "int2", center=True, center_skip=skip, center_from_cache=True),
                         KVTransform(scheme, D, Hkv, 1), D ** -0.5)(0, q, k, v)
    assert 1e-5 < (exact[-1:] - out[-1:]).abs().max() < 0.1


def test_eval_cli_prints_the_table(tmp_path, capsys):
    out = tmp_path / "rows.json"
    assert cli(["eval", "--schemes", "custom", "--tokens", "256", "--windows", "1", "--recent", "32",
                "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "late-half vs fp" in text and "int2 G32" in text
    rows = json.loads(out.read_text())
    assert [r["scheme"] for r in rows][0] == "fp" and set(rows[1]) >= {
        "scheme", "bits_per_element", "ppl", "fp_ppl", "rel_increase", "late_rel_increase", "tokens", "text"}


def test_eval_cli_reproduces_the_engines_data_free_centering(tmp_path, capsys):
    """`--center-first N`: the engine's default centering (the mean of the first N keys as int2
    reads them back) as a custom row; it changes the perplexity, and --center with it is refused."""
    rows = {}
    for first in (0, 16):
        out = tmp_path / f"rows{first}.json"
        assert cli(["eval", "--schemes", "custom", "--tokens", "256", "--windows", "1", "--recent", "32",
                    "--center-first", str(first), "--json", str(out)]) == 0
        rows[first] = json.loads(out.read_text())[1]
    assert "K-mean of first 16" in rows[16]["scheme"] and "K-mean" not in rows[0]["scheme"]
    assert rows[16]["ppl"] != rows[0]["ppl"]
    assert cli(["eval", "--schemes", "custom", "--center", "--center-first", "16"]) == 2
    assert "pick one" in capsys.readouterr().err


def test_longctx_items_are_unambiguous():
    from aphrodite_int2kv.quality.longctx import needle_items, position_items

    for task, prompt, truth in needle_items(4, 48) + position_items(4, 6, 2):
        body, question = prompt.rsplit("Question:", 1)
        assert body.count(truth) == 1, (task, truth)        # the answer appears once, as the needle
        assert truth not in question
    lines = needle_items(1, 48)[0][1].split("\n\n")[0].splitlines()
    assert len(lines) == 48 and len({l.rsplit(" ", 1)[0] for l in lines}) == 48   # 48 distinct keys


def _tiny_hf_model(tmp_path):
    """A random 2-layer Qwen3 with a word-level tokenizer, saved like a hub checkpoint."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    words = [f"w{i}" for i in range(200)]
    tk = Tokenizer(models.WordLevel({w: i for i, w in enumerate(["[UNK]"] + words)}, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    d = tmp_path / "hf"
    PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]").save_pretrained(d)
    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=64)
    Qwen3ForCausalLM(cfg).save_pretrained(d)
    text = tmp_path / "t.txt"
    g = torch.Generator().manual_seed(1)
    text.write_text(" ".join(words[int(i)] for i in torch.randint(0, 200, (300,), generator=g)))
    return str(d), str(text)


def test_k_offsets_for_any_hf_model_match_the_post_rope_key_mean(tmp_path, capsys):
    """`aphrodite-int2kv k-offsets` records post-RoPE keys through transformers' attention interface;
    the offsets equal the mean computed by hand from the model's own modules (layer 0), skipping the
    first tokens of each window, and the files load as the engine loads them."""
    import torch
    from transformers import Qwen3ForCausalLM
    from transformers.models.qwen3.modeling_qwen3 import apply_rotary_pos_emb

    model_dir, text = _tiny_hf_model(tmp_path)
    out = tmp_path / "rot"
    assert cli(["k-offsets", "--model", model_dir, "--text", text, "--tokens", "200", "--window", "50",
                "--skip", "4", "--device", "cpu", "--dtype", "float32", "--out", str(out)]) == 0
    got = load_rotation_file(str(out / "k_rotation.pt"), 64, 2, [0, 1])
    assert got[0]["k_offset"].shape == (2, 64)

    from transformers import AutoTokenizer
    ids = torch.tensor(AutoTokenizer.from_pretrained(model_dir)(open(text).read())["input_ids"][:200])
    m = Qwen3ForCausalLM.from_pretrained(model_dir).eval()
    attn = m.model.layers[0].self_attn
    keys = []
    with torch.no_grad():
        for w in ids.split(50):
            h = m.model.embed_tokens(w[None])
            x = m.model.layers[0].input_layernorm(h)
            k = attn.k_norm(attn.k_proj(x).view(1, 50, 2, 64)).transpose(1, 2)
            cos, sin = m.model.rotary_emb(x, torch.arange(50)[None])
            _, k = apply_rotary_pos_emb(k, k, cos, sin)
            keys.append(k[0, :, 4:])
    manual = torch.cat(keys, dim=1).double().mean(1).float()
    torch.testing.assert_close(got[0]["k_offset"], manual, atol=1e-4, rtol=1e-4)


def test_k_offsets_errors(tmp_path, capsys):
    model_dir, text = _tiny_hf_model(tmp_path)
    assert cli(["k-offsets", "--model", model_dir, "--text", str(tmp_path / "none.txt"), "--device", "cpu"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert cli(["k-offsets", "--model", model_dir, "--text", text, "--window", "5000", "--device", "cpu",
                "--dtype", "float32"]) == 2
    assert "need at least --window" in capsys.readouterr().err


@pytest.mark.parametrize("preset", ["turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc",
                                    "turboquant_3bit_nc"])
def test_the_rebuilt_turboquant_presets_match_the_engines_own(preset, engine):
    """The harness's turboquant rows stand for the engine's presets: the same bits, levels within
    the engine's numerical integration of its own Lloyd-Max solution, and its boundary layers."""
    from aphrodite.model_executor.layers.quantization.turboquant.centroids import solve_lloyd_max
    from aphrodite.model_executor.layers.quantization.turboquant.config import TurboQuantConfig

    from aphrodite_int2kv.quality.schemes import KVTransform, gaussian_lloyd_max, turboquant_preset

    scheme = turboquant_preset(preset)
    for D in (64, 128, 256):
        engine_cfg = TurboQuantConfig.from_cache_dtype(preset, D)
        assert scheme.bits_per_element(D) == pytest.approx(engine_cfg.slot_size * 8 / (2 * D))
        if scheme.k_bits != 8:
            ours, _ = gaussian_lloyd_max(scheme.k_bits, D ** -0.5)
            theirs, _ = solve_lloyd_max(D, scheme.k_bits)
            assert torch.allclose(ours, theirs, atol=5e-4)
    try:        # 0.21-0.23 take the layer count, 0.24 a model config (and skip nothing on hybrids)
        skipped = TurboQuantConfig.get_boundary_skip_layers(30)
    except AttributeError:
        from types import SimpleNamespace
        skipped = TurboQuantConfig.get_boundary_skip_layers(
            SimpleNamespace(is_hybrid=False, hf_text_config=SimpleNamespace(num_hidden_layers=30)))
    assert skipped == ["0", "1", "28", "29"]
    tf = KVTransform(scheme, 64, 3, 30)
    torch.manual_seed(0)
    k, v = torch.randn(64, 3, 64) * 3, torch.randn(64, 3, 64)
    for layer in range(30):
        kq, vq = tf(layer, k, v)
        if str(layer) in skipped:
            assert torch.equal(kq, k) and torch.equal(vq, v)
            continue
        # values: at most 2^v_bits levels per head vector, within half a step of the input
        assert max(len(torch.unique(vq[t, h])) for t in range(4) for h in range(3)) <= 2 ** scheme.v_bits
        step = (v.amax(-1, keepdim=True) - v.amin(-1, keepdim=True)) / (2 ** scheme.v_bits - 1)
        assert ((vq - v).abs() <= step * 0.51 + 1e-3).all()
        err = ((kq - k).norm() / k.norm()).item()
        assert err < {8: 0.05, 4: 0.15, 3: 0.25}[scheme.k_bits], err
        if scheme.norm_correction:   # the decoded key keeps the stored (fp16) norm
            assert torch.allclose(kq.norm(dim=-1), k.norm(dim=-1), rtol=2e-3)


@pytest.mark.parametrize("kind,qmax", [("int8_pth", 127.0), ("fp8_pth", 448.0)])
def test_the_rebuilt_per_token_head_dtypes(kind, qmax):
    """int8 / fp8_per_token_head: one scale per token and head (absmax / QMAX), 8 bits per
    element plus that fp32 scale; int8 codes are whole numbers within a step of the input."""
    from aphrodite_int2kv.quality.schemes import KVTransform, Scheme

    s = Scheme(kind, kind)
    assert s.bits_per_element(128) == 8 + 32 / 128
    torch.manual_seed(0)
    x = torch.randn(32, 2, 64) * 5
    got, _ = KVTransform(s, 64, 2, 4)(0, x, x)
    scale = x.abs().amax(-1, keepdim=True) / qmax
    top = (got / scale).abs().amax(-1)      # the absmax element lands on the top code (int8: or
    assert ((top <= qmax * 1.001) & (top >= qmax - 1.001)).all()   # one below, truncated from 126.99..)
    if kind == "int8_pth":
        codes = got / scale
        assert torch.allclose(codes, codes.round(), atol=1e-3) and ((got - x).abs() < scale * 1.001).all()
    else:
        assert ((got - x).abs() <= x.abs() * 2 ** -3 + 1e-6).all()


def test_longctx_takes_the_engine_dtypes_and_refuses_other_sets(capsys):
    from aphrodite_int2kv.quality.schemes import engine_dtype_schemes

    names = [s.name for s in engine_dtype_schemes()]
    assert names[0] == "fp" and any(n.startswith("turboquant_3bit_nc") for n in names)
    assert any(n.startswith("engine default") for n in names)
    with pytest.raises(SystemExit):
        cli(["longctx", "--schemes", "kivi-only"])
    assert "invalid choice" in capsys.readouterr().err


def test_every_engine_dtype_row_names_a_dtype_the_engine_offers(engine):
    """The engine-dtypes rows say which --kv-cache-dtype they stand for (the capacity plot joins
    them to the capacity rows by it): each one a dtype the installed engine offers, int2 included,
    and no two rows the same dtype."""
    import aphrodite_int2kv
    from aphrodite_int2kv.quality.engine_eval import engine_kv_dtypes
    from aphrodite_int2kv.quality.schemes import engine_dtype_schemes

    aphrodite_int2kv.register()
    named = [s.engine_dtype for s in engine_dtype_schemes()]
    assert len(set(named)) == len(named) and {"auto", "fp8", "int2"} <= set(named)
    assert set(named) <= set(engine_kv_dtypes()), set(named) - set(engine_kv_dtypes())
