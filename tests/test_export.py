"""The Hugging Face and CTranslate2 exports decode exactly like our own model."""

from pathlib import Path

import pytest
import torch
from fixture_model import DIRECTIONS, fixture_pairs, train_fixture_model

from nmt.checkpoint import load_model, save_model
from nmt.export import export_hf, hf_parameter_name, main
from nmt.model import ModelConfig, Transformer
from nmt.search import SearchOptions, greedy_search
from nmt.tokenizer import Tokenizer


def fixture_sources(tokenizer: Tokenizer) -> list[list[int]]:
    """Every fixture sentence in both directions, as encoder input ids."""
    texts = [(pair[i], target) for pair in fixture_pairs() for i, (_, target) in enumerate(DIRECTIONS)]
    return [tokenizer.source_ids(text, target) for text, target in texts]


MAX_TOKENS = 40  # output tokens, EOS included: the same cap for every system, so loops of a weak model compare too


def our_greedy(model: Transformer, source: list[int]) -> list[int]:
    options = SearchOptions(beam_size=1, max_len_a=0, max_len_b=MAX_TOKENS)
    return greedy_search(model, torch.tensor([source]), 2, 3, options)[0][0].tokens


def hf_greedy(model, source: list[int], eos_id: int) -> list[int]:
    generated = model.generate(torch.tensor([source]), num_beams=1, do_sample=False, max_length=MAX_TOKENS)
    return [t for t in generated[0, 1:].tolist() if t != eos_id]  # drop the start token and EOS


@pytest.fixture(scope="module")
def post_norm_model_dir(fixture_model_dir, tmp_path_factory) -> Path:
    """A briefly trained post-norm model: any weights will do for an equivalence check."""
    tokenizer = Tokenizer.load(fixture_model_dir / "spm.model")
    model = train_fixture_model(tokenizer, steps=40, pre_norm=False)
    return save_model(tmp_path_factory.mktemp("models") / "post-norm", model, tokenizer, {"language_pairs": [list(d) for d in DIRECTIONS]})


def test_every_parameter_has_a_hugging_face_name():
    for pre_norm in (True, False):
        model = Transformer(ModelConfig(vocab_size=32, d_model=16, n_heads=2, encoder_layers=1, decoder_layers=1, ffn_dim=32, pre_norm=pre_norm, tie_output=False))
        names = [hf_parameter_name(name) for name in model.state_dict()]
        assert len(set(names)) == len(names)
    assert hf_parameter_name("decoder_layers.2.cross_attn.k_proj.bias") == "model.decoder.layers.2.encoder_attn.k_proj.bias"
    assert hf_parameter_name("encoder_layers.5.ffn_block.norm.weight") == "model.encoder.layers.5.final_layer_norm.weight"


@pytest.mark.parametrize("pre_norm, architecture", [(True, "PegasusForConditionalGeneration"), (False, "MarianMTModel")])
def test_hf_export_decodes_like_our_model(fixture_model_dir, post_norm_model_dir, tmp_path, pre_norm, architecture):
    transformers = pytest.importorskip("transformers")
    model_dir = fixture_model_dir if pre_norm else post_norm_model_dir
    ours = load_model(model_dir)
    export_hf(model_dir, tmp_path / "hf")
    theirs = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "hf").eval()
    assert type(theirs).__name__ == architecture
    for source in fixture_sources(ours.tokenizer):
        assert hf_greedy(theirs, source, ours.tokenizer.eos_id) == our_greedy(ours.model, source)


def test_hf_tokenizer_writes_our_source_ids(fixture_model_dir, tmp_path):
    transformers = pytest.importorskip("transformers")
    ours = load_model(fixture_model_dir).tokenizer
    export_hf(fixture_model_dir, tmp_path / "hf")
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    for ko, en in fixture_pairs():
        assert theirs(f"<2en>{ko}")["input_ids"] == ours.source_ids(ko, "en")
        assert theirs(f"<2ko> {en}")["input_ids"] == ours.source_ids(en, "ko")
        assert theirs.decode(ours.encode(en)) == ours.decode(ours.encode(en))
        assert theirs(f"<2en><bt>{ko}")["input_ids"] == ours.source_ids(ko, "en", tagged=True)  # one piece, never split
    generation = transformers.GenerationConfig.from_pretrained(tmp_path / "hf")
    assert set(generation.suppress_tokens) == {ours.pad_id, ours.bos_id, ours.bt_id}


def test_ctranslate2_export_decodes_like_our_model(fixture_model_dir, tmp_path):
    pytest.importorskip("transformers")
    ctranslate2 = pytest.importorskip("ctranslate2")
    ours = load_model(fixture_model_dir)
    assert main(["--format", "ctranslate2", "--model", str(fixture_model_dir), "--out", str(tmp_path / "ct2")]) == 0
    for compute_type in ("float32", "int8"):
        translator = ctranslate2.Translator(str(tmp_path / "ct2"), device="cpu", compute_type=compute_type, intra_threads=1)
        for source in fixture_sources(ours.tokenizer):
            result = translator.translate_batch([ours.tokenizer.pieces(source)], beam_size=1, max_decoding_length=MAX_TOKENS - 1)
            pieces = result[0].hypotheses[0]
            assert [ours.tokenizer.sp.piece_to_id(p) for p in pieces] == our_greedy(ours.model, source), compute_type


def test_ctranslate2_export_of_a_post_norm_model_is_refused(post_norm_model_dir, tmp_path, capsys):
    pytest.importorskip("transformers")
    pytest.importorskip("ctranslate2")
    assert main(["--format", "ctranslate2", "--model", str(post_norm_model_dir), "--out", str(tmp_path / "ct2")]) == 2
    assert "pre-norm" in capsys.readouterr().err
