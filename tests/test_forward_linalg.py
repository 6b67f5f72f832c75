"""Forward mode through the matrix decompositions: the tangent rules of ``eigh``/``eigvalsh``,
``svd``/``svdvals``, ``qr`` and ``lstsq``, and forward over reverse (``hvp``) through their
adjoint calls.

Oracles: central differences along random directions for ``jvp`` (matrices with distinct
eigen- and singular values, of full rank); differences of the reverse-mode gradient for ``hvp``.
"""

import copy

import numpy as np
import pytest

import flowgrad
from test_forward_mode import EPS, _direction, check_jvp
from test_numpy_linalg import A4, B3, B6, CASES, IDS, S4, TALL, WIDE, eigh_factors, qr_factors, svd_factors


def lstsq_factors(A, b):
    x, res, rank, s = np.linalg.lstsq(A, b)
    return np.concatenate([x.ravel(), s])


B62 = np.stack([B6, B6 ** 2], axis=1)
B32 = np.stack([B3, B3 ** 2], axis=1)
FACTORS = [
    (eigh_factors, (S4,)), (eigh_factors, (A4,)),
    (svd_factors, (TALL,)), (svd_factors, (WIDE,)), (svd_factors, (A4,)),
    (qr_factors, (TALL,)), (qr_factors, (WIDE,)), (qr_factors, (A4,)),
    (lstsq_factors, (TALL, B6)), (lstsq_factors, (WIDE, B3)), (lstsq_factors, (TALL, B62)),
    (lstsq_factors, (WIDE, B32)),
]
FACTOR_IDS = [f"{fn.__name__}-{'x'.join(map(str, args[0].shape))}-{args[-1].ndim}" for fn, args in FACTORS]


@pytest.mark.parametrize("fn, args", FACTORS, ids=FACTOR_IDS)
def test_jvp_of_the_factors(fn, args):
    check_jvp(fn, args, tuple(range(len(args))), "numpy", rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fn, args", CASES, ids=IDS)
def test_jvp_of_linalg_programs(fn, args):
    check_jvp(fn, args, tuple(range(len(args))), "numpy", rtol=1e-5, atol=1e-6)


def check_hvp(fn, args, backend, wrt=0, rtol=1e-5, atol=1e-6):
    """``hvp`` equals the central difference of the reverse-mode gradient along a random ``v``."""
    v = _direction(np.random.default_rng(3), args[wrt])
    tangents = [None] * len(args)
    tangents[wrt] = v
    hv = flowgrad.hvp(fn, args, tangents, wrt=wrt, backend=backend)
    g = flowgrad.grad(fn, wrt=wrt, backend="numpy")
    plus, minus = list(copy.deepcopy(args)), list(copy.deepcopy(args))
    plus[wrt], minus[wrt] = plus[wrt] + EPS * v, minus[wrt] - EPS * v
    fd = (np.asarray(g(*plus)) - np.asarray(g(*minus))) / (2 * EPS)
    assert np.shape(hv) == np.shape(args[wrt])
    np.testing.assert_allclose(hv, fd, rtol=rtol, atol=atol, err_msg=f"{fn.__name__}: hvp vs differences")


HVP_CASES = [(fn, args, w) for fn, args in CASES for w in range(len(args))]
HVP_IDS = [f"{name}-wrt{w}" for name, (_, args) in zip(IDS, CASES) for w in range(len(args))]


@pytest.mark.parametrize("fn, args, wrt", HVP_CASES, ids=HVP_IDS)
def test_hvp_of_linalg_programs(fn, args, wrt):
    check_hvp(fn, args, "numpy", wrt)


NATIVE_FACTORS = [(eigh_factors, (S4,)), (svd_factors, (WIDE,)), (qr_factors, (WIDE,)), (lstsq_factors, (TALL, B62))]


@pytest.mark.native
@pytest.mark.parametrize("fn, args", NATIVE_FACTORS, ids=[fn.__name__ for fn, _ in NATIVE_FACTORS])
def test_native_jvp_of_the_factors(fn, args):
    check_jvp(fn, args, tuple(range(len(args))), "native", rtol=1e-5, atol=1e-6)


NATIVE_HVP = [CASES[0], CASES[4], CASES[7], CASES[9]]      # eigh, svd (wide), qr (wide), lstsq (tall)


@pytest.mark.native
@pytest.mark.parametrize("fn, args", NATIVE_HVP, ids=[fn.__name__ for fn, _ in NATIVE_HVP])
def test_native_hvp_of_linalg_programs(fn, args):
    check_hvp(fn, args, "native")
