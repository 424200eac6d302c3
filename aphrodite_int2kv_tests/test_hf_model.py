"""quality/hf_model.py: any Hugging Face causal LM in the harness (`--model DIR`), on small
random-weight models written here with transformers (their numbers mean nothing; the mechanics do):
full precision through the harness's attention is the model's own forward, a scheme changes only
what is read from far outside the window, and what the harness cannot do is refused."""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")


def _tokenizer(path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = ["<unk>"] + [f"w{i}" for i in range(255)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>").save_pretrained(path)


def _llama(path, **over):
    cfg = dict(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, head_dim=32 * 2, max_position_embeddings=4096)
    cfg.update(over)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**cfg))
    model.save_pretrained(path)
    _tokenizer(path)
    return str(path)


def test_full_precision_through_the_harness_is_the_models_own_forward(tmp_path):
    from aphrodite_int2kv.quality.hf_model import HFModel
    from aphrodite_int2kv.quality.schemes import KVTransform, Scheme, attention_fn

    path = _llama(tmp_path)
    m = HFModel(path)
    assert (m.cfg.n_layers, m.cfg.n_heads, m.cfg.n_kv_heads, m.cfg.head_dim) == (2, 4, 2, 64)
    ids = torch.randint(0, 256, (300,), generator=torch.Generator().manual_seed(1))
    own = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager")
    with torch.no_grad():
        want = own(input_ids=ids[None], use_cache=False).logits[0]
    fp = Scheme("fp", "fp")
    got = m.forward(ids, attention_fn(fp, KVTransform(fp, 64, 2, 2), 64 ** -0.5))
    assert torch.allclose(got, want, atol=2e-4, rtol=1e-4)
    tiles = Scheme("t", "tiles", k_bits=2, v_bits=2, tile=32, recent=128, sink=4)
    quant = m.forward(ids, attention_fn(tiles, KVTransform(tiles, 64, 2, 2), 64 ** -0.5), rows=torch.arange(300))
    assert torch.allclose(quant[:128], want[:128], atol=2e-4, rtol=1e-4)    # all keys still in the window
    assert not torch.allclose(quant[200:], want[200:], atol=1e-3)
    assert m.tok.decode(m.tok.encode("w1 w2 w3").ids) == "w1 w2 w3"


def _gemma3(path, window=64):
    """A Gemma-3-style stack: 5 local (sliding-window) layers to 1 global, one KV head, QK-norm."""
    torch.manual_seed(0)
    cfg = transformers.Gemma3TextConfig(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=6,
                                        num_attention_heads=4, num_key_value_heads=1, head_dim=64,
                                        query_pre_attn_scalar=64, sliding_window=window, max_position_embeddings=4096)
    model = transformers.Gemma3ForCausalLM(cfg)
    assert model.config.layer_types.count("sliding_attention") == 5
    model.save_pretrained(path)
    _tokenizer(path)
    return str(path)


def test_sliding_window_layers_attend_over_their_window_in_full_precision(tmp_path):
    """Gemma-3-style: full precision through the harness is the model's own forward, local layers
    included (their window mask as transformers applies it); a quantizing scheme changes only what
    the global layer reads far outside its window, the local layers stay in full precision (as the
    engine keeps them in the model dtype): a model whose every layer is local is unchanged by it."""
    from aphrodite_int2kv.quality.hf_model import HFModel
    from aphrodite_int2kv.quality.schemes import KVTransform, Scheme, attention_fn

    ids = torch.randint(0, 256, (300,), generator=torch.Generator().manual_seed(1))
    fp = Scheme("fp", "fp")
    tiles = Scheme("t", "tiles", k_bits=2, v_bits=2, tile=32, recent=128, sink=4)
    for name, layers in (("gemma3", None), ("local only", 6)):
        path = _gemma3(tmp_path / name.replace(" ", "_"))
        if layers:        # every layer local
            cfg = json.loads((tmp_path / "local_only" / "config.json").read_text())
            cfg["layer_types"] = ["sliding_attention"] * layers
            (tmp_path / "local_only" / "config.json").write_text(json.dumps(cfg))
        own = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager")
        with torch.no_grad():
            want = own(input_ids=ids[None], use_cache=False).logits[0]
        m = HFModel(path)
        assert (m.cfg.n_layers, m.cfg.n_heads, m.cfg.n_kv_heads, m.cfg.head_dim) == (6, 4, 1, 64)
        got = m.forward(ids, attention_fn(fp, KVTransform(fp, 64, 1, 6), 64 ** -0.5))
        assert torch.allclose(got, want, atol=2e-4, rtol=1e-4), (name, (got - want).abs().max())
        quant = m.forward(ids, attention_fn(tiles, KVTransform(tiles, 64, 1, 6), 64 ** -0.5))
        if layers:
            assert torch.allclose(quant, want, atol=2e-4, rtol=1e-4)
        else:
            assert torch.allclose(quant[:128], want[:128], atol=2e-4, rtol=1e-4)   # every key in the window
            assert not torch.allclose(quant[200:], want[200:], atol=1e-3)


def test_longctx_measures_a_hugging_face_model(tmp_path, capsys):
    from aphrodite_int2kv.cli import main as cli

    path = _llama(tmp_path / "m")
    out = tmp_path / "lc.json"
    assert cli(["longctx", "--model", path, "--distances", "512", "--passages", "1", "--far", "1024:moby-dick",
                "--passkeys", "", "--only", "engine default", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["scheme"].split(":")[0] for r in rows] == ["fp", "engine default"]
    assert rows[0]["tasks"]["far@1024:moby-dick"]["rel"] == 0 and rows[1]["bits_32k"] < 4


def test_local_attention_in_blocks_is_the_masked_softmax():
    """local_attention over blocks of queries (each against its window's keys only) equals one
    masked softmax over the whole sequence; GQA 4 query heads on 2 KV heads."""
    from aphrodite_int2kv.quality.hf_model import local_attention

    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(1, 4, 300, 32, generator=g), torch.randn(1, 2, 300, 32, generator=g), torch.randn(1, 2, 300, 32, generator=g)
    pos = torch.arange(300)
    dist = pos[:, None] - pos[None, :]
    s = q[0] @ k[0].repeat_interleave(2, 0).transpose(1, 2) * 0.2
    want = torch.softmax(s.masked_fill(~((dist >= 0) & (dist < 50)), float("-inf")), -1) @ v[0].repeat_interleave(2, 0)
    for block in (64, 512):
        got = local_attention(q, k, v, 50, 0.2, block=block)[0].transpose(0, 1)
        assert torch.allclose(got, want, atol=1e-5), block


def test_fp8_local_layers_read_what_the_engine_stores(tmp_path):
    """APHRODITE_INT2KV_LOCAL_KV_DTYPE=fp8 in the harness: the sliding-window layers read K/V
    rounded to e4m3 as the engine's fp8 cache holds them (scale 1, saturating); global layers and
    the next forward are unaffected; a model without local layers is refused by the CLI."""
    from aphrodite_int2kv.cli import main as cli
    from aphrodite_int2kv.quality.hf_model import HFModel, engine_fp8
    from aphrodite_int2kv.quality.schemes import KVTransform, Scheme, attention_fn

    x = torch.tensor([500.0, -1000.0, 1.07, 0.3])
    assert engine_fp8(x).tolist() == [448.0, -448.0, 1.125, 0.3125]

    ids = torch.randint(0, 256, (300,), generator=torch.Generator().manual_seed(1))
    fp = Scheme("fp", "fp")
    path = _gemma3(tmp_path / "g")
    m = HFModel(path)
    assert m.local_layers == 5
    want = m.forward(ids, attention_fn(fp, KVTransform(fp, 64, 1, 6), 64 ** -0.5))
    local8 = attention_fn(fp, KVTransform(fp, 64, 1, 6), 64 ** -0.5)
    local8.local_kv_dtype = "fp8"
    got = m.forward(ids, local8)
    assert not torch.allclose(got, want, atol=1e-4)
    assert (got - want).abs().max() < 0.1 * want.abs().max()
    again = m.forward(ids, attention_fn(fp, KVTransform(fp, 64, 1, 6), 64 ** -0.5))
    assert torch.equal(again, want)

    llama = HFModel(_llama(tmp_path / "l"))
    assert llama.local_layers == 0
    plain = llama.forward(ids, attention_fn(fp, KVTransform(fp, 64, 2, 2), 64 ** -0.5))
    local8 = attention_fn(fp, KVTransform(fp, 64, 2, 2), 64 ** -0.5)
    local8.local_kv_dtype = "fp8"
    assert torch.equal(llama.forward(ids, local8), plain)
    with pytest.raises(SystemExit, match="no sliding-window layers"):
        cli(["longctx", "--model", str(tmp_path / "l"), "--local-kv-dtype", "fp8", "--distances", "512",
             "--passages", "1", "--far", "", "--passkeys", ""])
