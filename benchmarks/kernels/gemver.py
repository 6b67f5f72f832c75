"""gemver: PolyBench gemver -- rank-2 update of A then two matrix-vector products, as row loops."""
import numpy as np


def kernel(alpha, beta, A, u1, v1, u2, v2, w, x, y, z):
    n = A.shape[0]
    for i in range(n):
        A[i, :] += u1[i] * v1 + u2[i] * v2
    for i in range(n):
        x += beta * A[i, :] * y[i]
    x += z
    for i in range(n):
        w[i] += alpha * (A[i, :] @ x)
    return np.sum(w * w) / n + np.sum(x * x) / n


WRT = ("alpha", "beta", "A", "u1", "v1", "u2", "v2", "w", "x", "y", "z")
SIZES = {"test": {"n": 10}, "bench": {"n": 2000},
         # bench4, 4x the work: n^2: n doubled
         "bench4": {"n": 4000}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    n = SIZES[size]["n"]
    s = 1.0 / np.sqrt(n)
    A = rng.standard_normal((n, n)) * s
    u1 = rng.standard_normal(n) * s
    v1 = rng.standard_normal(n)
    u2 = rng.standard_normal(n) * s
    v2 = rng.standard_normal(n)
    w = rng.standard_normal(n)
    x = rng.standard_normal(n)
    y = rng.standard_normal(n) * s
    z = rng.standard_normal(n)
    return (1.5, 1.2, A, u1, v1, u2, v2, w, x, y, z)


def jax_kernel(alpha, beta, A, u1, v1, u2, v2, w, x, y, z):
    import jax.numpy as jnp
    from jax import lax
    A, u1, v1, u2, v2, w, x, y, z = [jnp.asarray(a) for a in (A, u1, v1, u2, v2, w, x, y, z)]
    n = A.shape[0]
    A = lax.fori_loop(0, n, lambda i, A: A.at[i, :].add(u1[i] * v1 + u2[i] * v2), A)
    x = lax.fori_loop(0, n, lambda i, x: x + beta * A[i, :] * y[i], x)
    x = x + z
    w = lax.fori_loop(0, n, lambda i, w: w.at[i].add(alpha * (A[i, :] @ x)), w)
    return jnp.sum(w * w) / n + jnp.sum(x * x) / n
