"""Storage dtypes beyond the first cut: bfloat16 (stored natively, computed in float32) and float16, vs PyTorch."""

import numpy as np
import pytest
import torch

from ember.tensor import Tensor, dtypes


@pytest.mark.parametrize("dev", ["CPU", "PYTHON"])
def test_bfloat16_elementwise_and_sum_match_torch(dev):
    a = np.random.default_rng(0).standard_normal((5, 33)).astype(np.float32)
    ours = Tensor(a, dev, dtype=dtypes.bfloat16)
    ref = torch.tensor(a).bfloat16()
    np.testing.assert_array_equal(ours.float().numpy(), ref.float().numpy())  # same rounding to bfloat16
    np.testing.assert_array_equal((ours * ours + ours).float().numpy(), (ref * ref + ref).float().numpy())
    np.testing.assert_allclose(ours.sum(1).float().numpy(), ref.sum(1).float().numpy(), rtol=2e-2)
    with pytest.raises(TypeError, match="has no numpy dtype"):
        ours.numpy()


def test_float16_matches_torch():
    a = np.random.default_rng(1).standard_normal((7, 9)).astype(np.float16)
    got = (Tensor(a) * 3 + 1).numpy()
    np.testing.assert_allclose(got, (torch.tensor(a) * 3 + 1).numpy(), rtol=1e-3, atol=1e-3)
    assert got.dtype == np.float16
