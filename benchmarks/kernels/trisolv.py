"""trisolv: PolyBench trisolv -- forward substitution L x = b with a scalar inner loop j < i."""
import numpy as np


def kernel(L, b):
    n = L.shape[0]
    x = np.zeros(n)
    for i in range(n):
        x[i] = b[i]
        for j in range(i):
            x[i] -= L[i, j] * x[j]
        x[i] = x[i] / L[i, i]
    return np.sum(x * x) + np.sum(x)


WRT = ("L", "b")
SIZES = {"test": {"n": 10}, "bench": {"n": 300},
         # bench4, 4x the work: n^2/2: n doubled
         "bench4": {"n": 600}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    n = SIZES[size]["n"]
    L = np.tril(rng.uniform(-1.0, 1.0, (n, n))) / n + np.diag(rng.uniform(1.0, 2.0, n))
    b = rng.standard_normal(n)
    return (L, b)


def jax_kernel(L, b):
    import jax.numpy as jnp
    from jax import lax
    L = jnp.asarray(L)
    b = jnp.asarray(b)
    n = L.shape[0]

    # the j < i loop as a dot product with the whole row: x[j] is still 0 for j >= i
    def body(i, x):
        return x.at[i].set((b[i] - L[i] @ x) / L[i, i])

    x = lax.fori_loop(0, n, body, jnp.zeros(n))
    return jnp.sum(x * x) + jnp.sum(x)
