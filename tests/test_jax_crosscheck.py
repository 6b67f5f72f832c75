"""Gradients against another AD system: JAX (STYLE.md, rule 6).

Each NumPy program has a functional JAX twin computing the same function; flowgrad's
gradient of the NumPy program must equal ``jax.grad`` of the twin (float64, rtol 1e-8).
Covers the corpus kernels that define ``jax_kernel`` and a few hand-written programs.
"""

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="jax is not installed: the cross-check against jax.grad is skipped")
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402
import jax.scipy.linalg  # noqa: E402

import flowgrad  # noqa: E402
from oracle import resolve_wrt  # noqa: E402

pytestmark = pytest.mark.jax

RTOL = 1e-8


def as_jax(args):
    return [jnp.asarray(a) if isinstance(a, np.ndarray) else a for a in args]


def check_against_jax(fn, jax_fn, args, wrt, backend):
    """flowgrad.grad(fn) and jax.grad(jax_fn) agree for the arguments named in `wrt`."""
    wrt = tuple(wrt) if isinstance(wrt, (tuple, list)) else (wrt,)
    positions, _ = resolve_wrt(fn, args, wrt)
    ours = flowgrad.grad(fn, wrt=wrt, backend=backend)(*args)
    theirs = jax.grad(jax_fn, argnums=positions)(*as_jax(args))
    assert len(ours) == len(theirs) == len(wrt)
    for name, g, j in zip(wrt, ours, theirs):
        j = np.asarray(j, dtype=np.float64)
        assert np.shape(g) == j.shape, f"{fn.__name__}: gradient for {name!r} has shape {np.shape(g)}, jax {j.shape}"
        scale = max(float(np.max(np.abs(j))) if j.size else 0.0, 1e-300)
        np.testing.assert_allclose(
            g, j, rtol=RTOL, atol=1e-10 * scale,
            err_msg=f"{fn.__name__}: flowgrad and jax.grad disagree on d/d{name}",
        )


# ---------------------------------------------------------------------------------------
# Corpus kernels with a jax twin
# ---------------------------------------------------------------------------------------


def _corpus_params():
    try:
        import benchmarks.kernels as kernels

        names = list(kernels.NAMES)
    except (ImportError, AttributeError) as exc:
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"benchmarks.kernels unavailable: {exc}"))]
    with_twin = [n for n in names if hasattr(kernels.load(n), "jax_kernel")]
    if not with_twin:
        return [pytest.param(None, marks=pytest.mark.skip(reason="no corpus kernel defines jax_kernel"))]
    return with_twin


@pytest.mark.parametrize("name", _corpus_params())
def test_corpus_kernel_matches_jax(name, backend):
    import benchmarks.kernels as kernels

    mod = kernels.load(name)
    check_against_jax(mod.kernel, mod.jax_kernel, mod.args("test"), mod.WRT, backend)


# ---------------------------------------------------------------------------------------
# Hand-written programs and their twins
# ---------------------------------------------------------------------------------------


def U(shape, lo=-1.0, hi=1.0, seed=0):
    return np.random.default_rng(seed).uniform(lo, hi, shape)


def heat_inplace(u0, kappa, n):
    u = u0.copy()
    for t in range(n):
        u[1:-1] += kappa * (u[2:] - 2.0 * u[1:-1] + u[:-2]) - 0.1 * u[1:-1] ** 3
    return np.sum(u ** 2)


def heat_inplace_jax(u0, kappa, n):
    u = u0
    for t in range(n):
        u = u.at[1:-1].add(kappa * (u[2:] - 2.0 * u[1:-1] + u[:-2]) - 0.1 * u[1:-1] ** 3)
    return jnp.sum(u ** 2)


def piecewise_loop(x):
    s = 0.0
    for i in range(x.shape[0]):
        if x[i] > 0.2:
            s += x[i] ** 2
        else:
            s += np.sin(x[i]) * 0.5
    return s


def piecewise_loop_jax(x):
    return jnp.sum(jnp.where(x > 0.2, x ** 2, jnp.sin(x) * 0.5))


def mlp_loss(W1, b1, W2, X, y):
    h = np.tanh(X @ W1 + b1)
    out = h @ W2
    return np.mean((out[:, 0] - y) ** 2)


def mlp_loss_jax(W1, b1, W2, X, y):
    h = jnp.tanh(X @ W1 + b1)
    out = h @ W2
    return jnp.mean((out[:, 0] - y) ** 2)


def scatter_accumulate(x, v, idx):
    y = x * 1.0
    np.add.at(y, idx, v ** 2)
    return np.sum(np.sin(y) * y)


def scatter_accumulate_jax(x, v, idx):
    y = x.at[idx].add(v ** 2)
    return jnp.sum(jnp.sin(y) * y)


def newton_sqrt(a):
    y = a.copy()
    while np.max(np.abs(y * y - a)) > 1e-13 * np.max(a):
        y = 0.5 * (y + a / y)
    return np.sum(y * np.cos(a))


def newton_sqrt_jax(a):
    return jnp.sum(jnp.sqrt(a) * jnp.cos(a))


def forward_substitution(L, b):
    n = b.shape[0]
    x = np.zeros(n)
    for i in range(n):
        s = b[i]
        for j in range(i):
            s -= L[i, j] * x[j]
        x[i] = s / L[i, i]
    return np.sum(x ** 2)


def forward_substitution_jax(L, b):
    x = jax.scipy.linalg.solve_triangular(jnp.tril(L), b, lower=True)
    return jnp.sum(x ** 2)


def double_buffer(u0, n):
    a = u0.copy()
    b = u0.copy()
    for t in range(n):
        b[1:-1] = 0.5 * a[1:-1] + 0.25 * (a[2:] + a[:-2]) * np.cos(a[1:-1])
        a, b = b, a
    return np.sum(a * u0)


def double_buffer_jax(u0, n):
    a = u0
    b = u0
    for t in range(n):
        b = b.at[1:-1].set(0.5 * a[1:-1] + 0.25 * (a[2:] + a[:-2]) * jnp.cos(a[1:-1]))
        a, b = b, a
    return jnp.sum(a * u0)


def _lower(n):
    return np.tril(U((n, n), seed=3)) * 0.5 + 2.0 * np.eye(n)


def _piecewise_input():
    x = U((8,), seed=4)
    x[np.abs(x - 0.2) < 0.1] += 0.25
    return x


HAND_WRITTEN = [
    pytest.param(heat_inplace, heat_inplace_jax, lambda: (U((8,)), 0.2, 4), ("u0", "kappa"), id="inplace-loop"),
    pytest.param(piecewise_loop, piecewise_loop_jax, lambda: (_piecewise_input(),), ("x",), id="branch-in-loop"),
    pytest.param(
        mlp_loss, mlp_loss_jax,
        lambda: (U((3, 5)), U((5,), seed=1), U((5, 1), seed=2), U((4, 3), seed=5), U((4,), seed=6)),
        ("W1", "b1", "W2"), id="matmul-chain",
    ),
    pytest.param(
        scatter_accumulate, scatter_accumulate_jax,
        lambda: (U((6,)), U((5,), seed=1), np.array([1, 3, 1, 1, 4])), ("x", "v"), id="add-at-repeated",
    ),
    pytest.param(newton_sqrt, newton_sqrt_jax, lambda: (U((5,), 0.5, 3.0),), ("a",), id="while-newton"),
    pytest.param(
        forward_substitution, forward_substitution_jax, lambda: (_lower(4), U((4,), seed=1)), ("L", "b"),
        id="triangular-loops",
    ),
    pytest.param(double_buffer, double_buffer_jax, lambda: (U((7,)), 3), ("u0",), id="swap-double-buffer"),
]


@pytest.mark.parametrize("fn, jax_fn, make, wrt", HAND_WRITTEN)
def test_hand_written_matches_jax(fn, jax_fn, make, wrt, backend):
    check_against_jax(fn, jax_fn, make(), wrt, backend)


@pytest.mark.parametrize("fn, jax_fn, make, wrt", HAND_WRITTEN)
def test_twins_compute_the_same_value(fn, jax_fn, make, wrt):
    """Guards the twins themselves: without this a wrong twin would blame flowgrad."""
    args = make()
    np.testing.assert_allclose(
        float(fn(*[np.copy(a) if isinstance(a, np.ndarray) else a for a in args])),
        float(jax_fn(*as_jax(args))), rtol=1e-12, atol=1e-12,
    )
