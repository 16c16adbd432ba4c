"""The Transformer: causal masking, padding invariance, and incremental decoding equal to full decoding."""

import pytest
import torch
from fixture_model import tiny_config

from nmt.model import SinusoidalPositions, Transformer

VOCAB = 50
NORMS = pytest.mark.parametrize("pre_norm", [True, False], ids=["pre-norm", "post-norm"])


def random_model(pre_norm: bool = True) -> Transformer:
    """An untrained tiny model: its outputs are arbitrary but must still obey masking and caching."""
    torch.manual_seed(0)
    return Transformer(tiny_config(VOCAB, pre_norm=pre_norm)).eval()


def random_tokens(*shape: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(4, VOCAB, shape, generator=torch.Generator().manual_seed(seed))


@NORMS
@torch.no_grad()
def test_decoder_output_at_t_ignores_later_tokens(pre_norm):
    model = random_model(pre_norm)
    source, target = random_tokens(2, 7), random_tokens(2, 8, seed=2)
    memory, memory_mask = model.encode(source)
    changed = target.clone()
    changed[:, 5:] = random_tokens(2, 3, seed=3)
    before, _ = model.decode(target, memory, memory_mask)
    after, _ = model.decode(changed, memory, memory_mask)
    torch.testing.assert_close(after[:, :5], before[:, :5], atol=1e-5, rtol=0)
    assert not torch.allclose(after[:, 5:], before[:, 5:]), "later positions should see their changed tokens"


@NORMS
@torch.no_grad()
def test_outputs_do_not_depend_on_padding_or_batch_mates(pre_norm):
    model = random_model(pre_norm)
    sentence, target = random_tokens(1, 5), random_tokens(1, 4, seed=2)
    alone_memory, alone_mask = model.encode(sentence)
    alone_logits, _ = model.decode(target, alone_memory, alone_mask)

    padded = torch.zeros(3, 9, dtype=torch.long)
    padded[0, :5] = sentence[0]  # four padding columns
    padded[1:] = random_tokens(2, 9, seed=4)  # longer batch mates
    memory, memory_mask = model.encode(padded)
    logits, _ = model.decode(target.expand(3, -1), memory, memory_mask)

    torch.testing.assert_close(memory[:1, :5], alone_memory, atol=1e-5, rtol=0)
    torch.testing.assert_close(logits[:1], alone_logits, atol=1e-5, rtol=0)


@NORMS
@torch.no_grad()
def test_incremental_decoding_matches_full_decoding(pre_norm):
    model = random_model(pre_norm)
    source = random_tokens(2, 6)
    source[1, 4:] = model.config.pad_id
    target = random_tokens(2, 7, seed=2)
    memory, memory_mask = model.encode(source)
    full_logits, full_weights = model.decode(target, memory, memory_mask, need_weights=True)

    cache = model.start_cache(memory, memory_mask)
    steps = [model.decode_step(target[:, t], cache, need_weights=True) for t in range(target.size(1))]
    step_logits = torch.stack([logits for logits, _ in steps], dim=1)
    step_weights = torch.stack([weights for _, weights in steps], dim=1)

    assert cache.steps == target.size(1)
    torch.testing.assert_close(step_logits, full_logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(step_weights, full_weights, atol=1e-5, rtol=0)
    assert torch.all(full_weights[1, :, 4:] == 0), "padding must get no cross-attention"


@NORMS
@torch.no_grad()
def test_asking_for_attention_weights_does_not_change_logits(pre_norm):
    model = random_model(pre_norm)
    memory, memory_mask = model.encode(random_tokens(2, 6))
    target = random_tokens(2, 5, seed=2)
    fused, no_weights = model.decode(target, memory, memory_mask)
    explicit, weights = model.decode(target, memory, memory_mask, need_weights=True)
    assert no_weights is None
    assert weights.shape == (2, 5, 6)
    torch.testing.assert_close(explicit, fused, atol=1e-5, rtol=0)


@torch.no_grad()
def test_untied_output_projection_has_vocabulary_width():
    torch.manual_seed(0)
    model = Transformer(tiny_config(VOCAB, tie_output=False)).eval()
    assert model(random_tokens(2, 6), random_tokens(2, 3)).shape == (2, 3, VOCAB)
    assert model.num_parameters() > random_model().num_parameters()  # an extra d_model × vocabulary matrix


def test_positions_beyond_the_table_are_refused():
    positions = SinusoidalPositions(d_model=8, max_positions=10)
    assert positions(4, start=6).shape == (4, 8)
    with pytest.raises(ValueError, match="exceeds max_positions 10"):
        positions(5, start=6)
