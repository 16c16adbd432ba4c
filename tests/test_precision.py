"""The GPUs' bf16 decoding copy (nmt.precision.all_bfloat16), checked on the CPU: one dtype throughout, no autocast,
and the fixture model's translations kept."""

import copy

import torch
from fixture_model import fixture_examples, pad, tiny_config

from nmt.checkpoint import load_model
from nmt.model import Transformer
from nmt.precision import all_bfloat16, fuse_self_attention
from nmt.search import SearchOptions, beam_search, greedy_search


def bf16_copy(model: Transformer) -> Transformer:
    """What prepare_for_inference builds on a GPU for precision="bf16", built here on the CPU."""
    model = copy.deepcopy(model).eval()
    fuse_self_attention(model)
    return all_bfloat16(model)


def test_every_parameter_buffer_and_cache_is_bfloat16():
    torch.manual_seed(0)
    model = bf16_copy(Transformer(tiny_config(64)))
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert {b.dtype for b in model.buffers()} == {torch.bfloat16}
    with torch.inference_mode():
        memory, mask = model.encode(torch.randint(4, 64, (2, 5)))
        cache = model.start_cache(memory, mask)
        logits, _ = model.decode_step(torch.tensor([2, 2]), cache)
    assert memory.dtype == logits.dtype == torch.bfloat16
    layer = cache.layers[0]
    assert layer.self_attn.keys.dtype == layer.cross_attn.keys.dtype == torch.bfloat16
    assert not torch.is_autocast_enabled("cpu")


def test_the_bf16_copy_computes_the_trained_model_logits():
    torch.manual_seed(0)
    model = Transformer(tiny_config(64)).eval()
    source, target = torch.randint(4, 64, (3, 7)), torch.randint(4, 64, (3, 6))
    with torch.inference_mode():
        expected = model(source, target)
        actual = bf16_copy(model)(source, target)
    torch.testing.assert_close(actual.float(), expected, rtol=0, atol=0.1)


def test_the_bf16_copy_reproduces_most_fixture_translations(fixture_model_dir):
    """Beam and greedy search over the bf16 copy: rounding may flip a near tie of the tiny model, no more."""
    loaded = load_model(fixture_model_dir)
    model, examples = bf16_copy(loaded.model), fixture_examples(loaded.tokenizer)
    source = pad([s for s, _ in examples])
    for search, options in ((beam_search, SearchOptions(beam_size=4)), (greedy_search, SearchOptions(beam_size=1))):
        results = search(model, source, loaded.tokenizer.bos_id, loaded.tokenizer.eos_id, options)
        reproduced = sum(nbest[0].tokens == target[1:-1] for nbest, (_, target) in zip(results, examples))
        assert reproduced >= 0.9 * len(examples), search.__name__
