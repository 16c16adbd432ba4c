"""The decoding fast paths compute what the plain ones do: block top-k, the growing key/value cache, beams
sharing one encoder cache row, fused projections, and the fp32/bf16/int8 inference models."""

import copy

import pytest
import torch
from fixture_model import fixture_examples, fixture_pairs, pad, tiny_config
from test_translate_cli import run_cli

from nmt.attention import KeyValueCache, MultiHeadAttention
from nmt.model import Transformer
from nmt.precision import cpu_has_bf16, prepare_for_inference
from nmt.search import SearchOptions, beam_search, top_k
from nmt.translator import Translator


@pytest.mark.parametrize("width", [8000, 600], ids=["blocks", "plain-topk"])
@pytest.mark.parametrize("k", [1, 8])
def test_block_top_k_finds_the_k_largest_values(width, k):
    values = torch.randn(6, width, generator=torch.Generator().manual_seed(0)).log_softmax(dim=-1)
    values[:, 0] = float("-inf")
    values[1, :] = float("-inf")
    values[1, 3] = 0.0  # a row with one finite entry, like a hypothesis at its length limit
    top, indices = top_k(values, k)
    torch.testing.assert_close(top, values.topk(k, dim=-1).values, rtol=0, atol=0)
    torch.testing.assert_close(values.gather(1, indices), top, rtol=0, atol=0)
    assert indices[1, 0] == 3


def test_cache_keeps_its_contents_when_it_grows_and_when_rows_are_selected():
    cache = KeyValueCache(torch.zeros(2, 3, 0, 4), torch.zeros(2, 3, 0, 4))
    steps = [torch.randn(5, 3, 1, 4) for _ in range(40)]  # the first append sets the row count (5, not 2)
    for step in steps[:20]:
        cache.append(step, -step)
    cache.select(torch.tensor([4, 4, 0]))
    for step in steps[20:]:
        cache.append(step[:3], -step[:3])
    expected = torch.cat([torch.cat(steps[:20], dim=2)[[4, 4, 0]], torch.cat([s[:3] for s in steps[20:]], dim=2)], dim=2)
    assert cache.keys.shape == (3, 3, 40, 4)
    torch.testing.assert_close(cache.keys, expected, rtol=0, atol=0)
    torch.testing.assert_close(cache.values, -expected, rtol=0, atol=0)


def test_beams_sharing_an_encoder_cache_row_attend_as_if_each_had_its_own():
    torch.manual_seed(0)
    attention = MultiHeadAttention(d_model=16, n_heads=4).eval()
    sources, beams = torch.randn(3, 5, 16), 4
    mask = torch.ones(3, 1, 1, 5, dtype=torch.bool)
    mask[1, ..., 3:] = False
    query = torch.randn(3 * beams, 1, 16)
    shared = attention.project_keys_values(sources)
    replicated = attention.project_keys_values(sources.repeat_interleave(beams, dim=0))
    out, weights = attention(query, mask=mask, cache=shared, static_source=True, need_weights=True)
    expected, expected_weights = attention(query, mask=mask.repeat_interleave(beams, dim=0), cache=replicated, static_source=True, need_weights=True)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(weights, expected_weights)


def test_fused_projections_give_the_same_self_attention():
    torch.manual_seed(0)
    attention = MultiHeadAttention(d_model=16, n_heads=4).eval()
    x, mask = torch.randn(2, 5, 16), torch.ones(2, 1, 5, 5, dtype=torch.bool).tril()
    expected = attention(x, mask=mask)[0]
    attention.fuse_projections()
    torch.testing.assert_close(attention(x, mask=mask)[0], expected)
    with pytest.raises(ValueError, match="self-attention"):
        attention(x, source=x)


NEEDS_CPU_BF16 = pytest.mark.skipif(not cpu_has_bf16(), reason="this CPU has no bf16 kernels (AVX-512 or AVX-NE-CONVERT)")


@pytest.mark.parametrize("precision, tolerance", [("fp32", 1e-4), pytest.param("bf16", 0.1, marks=NEEDS_CPU_BF16), ("int8", 0.5)])
def test_inference_models_compute_the_trained_model_logits(precision, tolerance):
    torch.manual_seed(0)
    model = Transformer(tiny_config(64)).eval()
    source, target = torch.randint(4, 64, (3, 7)), torch.randint(4, 64, (3, 6))
    with torch.inference_mode():
        expected = model(source, target)
        prepared = prepare_for_inference(copy.deepcopy(model), precision)
        torch.testing.assert_close(prepared(source, target), expected, rtol=0, atol=tolerance)


@pytest.mark.parametrize("precision, share", [("fp32", 1.0), pytest.param("bf16", 0.9, marks=NEEDS_CPU_BF16), ("int8", 0.9)])
def test_every_precision_reproduces_the_fixture_translations(fixture_model_dir, precision, share):
    """fp32 exactly; rounding may flip a near tie of the tiny fixture model at reduced precision."""
    translator = Translator.load(fixture_model_dir, "cpu", precision=precision)
    examples = fixture_examples(translator.tokenizer)
    results = beam_search(translator.inference_model, pad([s for s, _ in examples]), 2, 3, SearchOptions(beam_size=4))
    reproduced = sum(nbest[0].tokens == target[1:-1] for nbest, (_, target) in zip(results, examples))
    assert reproduced >= share * len(examples)


@pytest.mark.skipif(cpu_has_bf16(), reason="this CPU has bf16 kernels")
def test_bf16_is_refused_with_a_reason_on_a_cpu_without_bf16_kernels(fixture_model_dir):
    with pytest.raises(ValueError, match="bf16 decoding on a CPU needs AVX-512.*use fp32, or int8"):
        Translator.load(fixture_model_dir, "cpu", precision="bf16")


def test_unknown_precision_is_refused(fixture_model_dir):
    with pytest.raises(ValueError, match="precision must be one of"):
        Translator.load(fixture_model_dir, "cpu", precision="fp8")


def test_cli_int8_flag(fixture_model_dir):
    ko, en = fixture_pairs()[0]
    result = run_cli(fixture_model_dir, "--source-lang", "ko", "--target-lang", "en", "--device", "cpu", "--int8", stdin=ko + "\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout == en + "\n"


def test_preparing_the_inference_copy_leaves_the_random_state_alone(fixture_translator):
    """Dev evaluation builds a Translator mid-training; exact resume needs the RNG untouched by it."""
    before = torch.random.get_rng_state()
    Translator(fixture_translator.model, fixture_translator.tokenizer, fixture_translator.metadata, precision="int8")
    Translator(fixture_translator.model, fixture_translator.tokenizer, fixture_translator.metadata)
    assert torch.equal(torch.random.get_rng_state(), before)
