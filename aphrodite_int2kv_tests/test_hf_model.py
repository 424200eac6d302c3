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


def test_sliding_window_models_are_refused(tmp_path):
    from aphrodite_int2kv.quality.hf_model import HFModel
    from aphrodite_int2kv.quality.schemes import KVTransform, Scheme, attention_fn

    torch.manual_seed(0)
    cfg = transformers.MistralConfig(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=1,
                                     num_attention_heads=4, num_key_value_heads=2, head_dim=32, sliding_window=64)
    transformers.MistralForCausalLM(cfg).save_pretrained(tmp_path)
    _tokenizer(tmp_path)
    m = HFModel(str(tmp_path))
    fp = Scheme("fp", "fp")
    with pytest.raises(NotImplementedError, match="sliding window"):
        m.forward(torch.arange(100), attention_fn(fp, KVTransform(fp, 32, 2, 1), 32 ** -0.5))


def test_longctx_measures_a_hugging_face_model(tmp_path, capsys):
    from aphrodite_int2kv.cli import main as cli

    path = _llama(tmp_path / "m")
    out = tmp_path / "lc.json"
    assert cli(["longctx", "--model", path, "--distances", "512", "--passages", "1", "--far", "1024:moby-dick",
                "--passkeys", "", "--only", "engine default", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["scheme"].split(":")[0] for r in rows] == ["fp", "engine default"]
    assert rows[0]["tasks"]["far@1024:moby-dick"]["rel"] == 0 and rows[1]["bits_32k"] < 4
