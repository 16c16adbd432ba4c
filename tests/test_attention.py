"""Scaled dot-product and multi-head attention: the explicit formula agrees with the fused kernel."""

import pytest
import torch

from nmt.attention import KeyValueCache, MultiHeadAttention, scaled_dot_product_attention


@pytest.fixture
def qkv_and_mask() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Batch 2, 3 heads, 4 queries, 5 keys; the second sentence's last two keys are padding."""
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, length, 8, generator=generator) for length in (4, 5, 5))
    mask = torch.tensor([[True] * 5, [True, True, True, False, False]])[:, None, None, :]
    return q, k, v, mask


def test_explicit_formula_matches_fused_kernel(qkv_and_mask):
    q, k, v, mask = qkv_and_mask
    fused, no_weights = scaled_dot_product_attention(q, k, v, mask)
    explicit, weights = scaled_dot_product_attention(q, k, v, mask, need_weights=True)
    assert no_weights is None
    torch.testing.assert_close(explicit, fused, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(weights.sum(dim=-1), torch.ones(2, 3, 4))
    assert torch.all(weights[1, :, :, 3:] == 0), "padding keys must get no attention"


def test_masked_keys_do_not_influence_the_output(qkv_and_mask):
    q, k, v, mask = qkv_and_mask
    before, _ = scaled_dot_product_attention(q, k, v, mask)
    k, v = k.clone(), v.clone()
    k[1, :, 3:], v[1, :, 3:] = 100.0, -100.0
    after, _ = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(after, before)


def test_multi_head_weights_are_head_averaged_and_outputs_agree():
    torch.manual_seed(0)
    attention = MultiHeadAttention(d_model=16, n_heads=4).eval()
    query, source = torch.randn(2, 3, 16), torch.randn(2, 6, 16)
    fused, none = attention(query, source)
    explicit, weights = attention(query, source, need_weights=True)
    assert none is None
    assert weights.shape == (2, 3, 6)
    torch.testing.assert_close(explicit, fused, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(weights.sum(dim=-1), torch.ones(2, 3))


def test_d_model_must_divide_into_heads():
    with pytest.raises(ValueError, match="not divisible"):
        MultiHeadAttention(d_model=10, n_heads=4)


def test_cache_appends_along_time_and_selects_rows():
    cache = KeyValueCache(torch.zeros(3, 2, 0, 4), torch.zeros(3, 2, 0, 4))
    for step in range(2):
        rows = torch.arange(3, dtype=torch.float)[:, None, None, None] + 10 * step
        cache.append(rows.expand(3, 2, 1, 4), -rows.expand(3, 2, 1, 4))
    assert cache.keys.shape == cache.values.shape == (3, 2, 2, 4)
    cache.select(torch.tensor([2, 0, 0]))
    assert cache.keys[:, 0, :, 0].tolist() == [[2, 12], [0, 10], [0, 10]]
    assert cache.values[:, 0, :, 0].tolist() == [[-2, -12], [0, -10], [0, -10]]


def test_joining_rows_are_zero_filled_and_reordering_reuses_two_buffers():
    def rows(first: int, count: int, length: int) -> torch.Tensor:  # row r holds r + 10·position
        return (torch.arange(first, first + count, dtype=torch.float)[:, None, None, None]
                + 10 * torch.arange(length, dtype=torch.float)[None, None, :, None]).expand(count, 2, length, 4)

    cache = KeyValueCache(torch.zeros(2, 2, 0, 4), torch.zeros(2, 2, 0, 4))
    cache.append(rows(0, 2, 3), -rows(0, 2, 3))
    cache.append_rows(KeyValueCache(rows(5, 1, 1), -rows(5, 1, 1)))  # a shorter newcomer: zeros after its own positions
    assert cache.keys[:, 0, :, 0].tolist() == [[0, 10, 20], [1, 11, 21], [5, 0, 0]]
    assert cache.values[:, 0, :, 0].tolist() == [[0, -10, -20], [-1, -11, -21], [-5, 0, 0]]

    addresses = set()
    for order in ([2, 0, 1], [1, 2, 0], [0, 0, 1]):
        cache.select(torch.tensor(order))
        addresses.add(cache.keys.data_ptr())
    assert cache.keys[:, 0, :, 0].tolist() == [[0, 10, 20], [0, 10, 20], [1, 11, 21]]  # the three orders composed
    assert len(addresses) == 2  # every reorder writes the spare buffer, which then swaps in: nothing is allocated
