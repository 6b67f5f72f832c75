"""mvt: PolyBench mvt -- x1 += A@y1 and x2 += A^T@y2, row and column loops."""
import numpy as np


def kernel(x1, x2, y1, y2, A):
    n = A.shape[0]
    for i in range(n):
        x1[i] += A[i, :] @ y1
    for i in range(n):
        x2[i] += A[:, i] @ y2
    return (np.sum(x1 * x1) + np.sum(x2 * x2)) / n


WRT = ("x1", "x2", "y1", "y2", "A")
SIZES = {"test": {"n": 10}, "bench": {"n": 2000},
         # bench4, 4x the work: n^2: n doubled
         "bench4": {"n": 4000}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    n = SIZES[size]["n"]
    x1 = rng.standard_normal(n)
    x2 = rng.standard_normal(n)
    y1 = rng.standard_normal(n)
    y2 = rng.standard_normal(n)
    A = rng.standard_normal((n, n)) / np.sqrt(n)
    return (x1, x2, y1, y2, A)


def jax_kernel(x1, x2, y1, y2, A):
    import jax.numpy as jnp
    from jax import lax
    x1, x2, y1, y2, A = [jnp.asarray(a) for a in (x1, x2, y1, y2, A)]
    n = A.shape[0]
    x1 = lax.fori_loop(0, n, lambda i, x: x.at[i].add(A[i, :] @ y1), x1)
    x2 = lax.fori_loop(0, n, lambda i, x: x.at[i].add(A[:, i] @ y2), x2)
    return (jnp.sum(x1 * x1) + jnp.sum(x2 * x2)) / n
