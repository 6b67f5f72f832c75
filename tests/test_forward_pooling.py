"""Forward mode through max pooling and ``torch.max(x, dim)`` (``pool``, ``pool_jvp``,
``max_first``) and forward over reverse through their adjoints (``pool_grad``,
``max_first_grad``), on models captured from PyTorch.

Oracles: central differences along a random direction for ``jvp`` (distinct values: no ties);
differences of the reverse-mode gradient for ``hvp``.
"""

import numpy as np
import pytest

import flowgrad
from test_forward_linalg import check_hvp
from test_forward_mode import EPS

torch = pytest.importorskip("torch", reason="the PyTorch frontend needs torch (pip install torch==2.13.0)")
F = torch.nn.functional
pytestmark = pytest.mark.ml


class _Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def _pools(x):
    return torch.cat([F.max_pool2d(x, 3, 2, 1).flatten(), F.avg_pool2d(x, 3, 2, 1).flatten(),
                      F.max_pool2d(x, 2, dilation=2).flatten(), torch.max(x, dim=2).values.flatten(),
                      torch.max(x, dim=3).values.flatten()])


def _pool_loss(x):
    return (F.max_pool2d(x, 3, 2, 1) ** 2).sum() + (torch.max(x, dim=3).values ** 3).sum()


def _model_jvp(prog, x, tx, backend):
    out, t = flowgrad.jvp(prog, (x,), (tx,), backend=backend)
    return np.asarray(out), np.asarray(t)


@pytest.mark.parametrize("backend", ["numpy", pytest.param("native", marks=pytest.mark.native)])
def test_jvp_of_max_pooling_and_max_first(backend):
    """Max pooling and torch.max(x, dim): the tangent of each window's first maximal element,
    against central differences (distinct values: no ties)."""
    x = np.random.default_rng(0).permutation(2 * 3 * 7 * 6).reshape(2, 3, 7, 6) / 50.0
    prog = flowgrad.from_torch(_Fn(_pools).double(), torch.tensor(x), backend=backend)
    tx = np.random.default_rng(1).standard_normal(x.shape)
    out, t = _model_jvp(prog, x, tx, backend)
    fd = (np.asarray(prog(x + EPS * tx)) - np.asarray(prog(x - EPS * tx))) / (2 * EPS)
    np.testing.assert_allclose(out, prog(x), rtol=1e-12)
    np.testing.assert_allclose(t, fd, rtol=1e-6, atol=1e-7)


def test_hvp_through_max_pooling():
    """Forward over reverse through pool_grad and max_first_grad."""
    x = np.random.default_rng(0).permutation(1 * 2 * 6 * 6).reshape(1, 2, 6, 6) / 20.0
    prog = flowgrad.from_torch(_Fn(_pool_loss).double(), torch.tensor(x))
    check_hvp(prog, (x,), "numpy")
