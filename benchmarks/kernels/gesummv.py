"""gesummv: PolyBench gesummv -- y = alpha*A@x + beta*B@x with scalar temporaries per row."""
import numpy as np


def kernel(alpha, beta, A, B, x):
    n = A.shape[0]
    tmp = np.zeros(n)
    y = np.zeros(n)
    for i in range(n):
        tmp[i] = A[i, :] @ x
        y[i] = B[i, :] @ x
        y[i] = alpha * tmp[i] + beta * y[i]
    return np.sum(y * y) / n


WRT = ("alpha", "beta", "A", "B", "x")
SIZES = {"test": {"n": 10}, "bench": {"n": 2000},
         # bench4, 4x the work: n^2: n doubled
         "bench4": {"n": 4000}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    n = SIZES[size]["n"]
    A = rng.standard_normal((n, n)) / np.sqrt(n)
    B = rng.standard_normal((n, n)) / np.sqrt(n)
    x = rng.standard_normal(n)
    return (1.5, 1.2, A, B, x)


def jax_kernel(alpha, beta, A, B, x):
    import jax.numpy as jnp
    from jax import lax
    A = jnp.asarray(A)
    B = jnp.asarray(B)
    x = jnp.asarray(x)
    n = A.shape[0]

    def body(i, c):
        tmp, y = c
        tmp = tmp.at[i].set(A[i, :] @ x)
        y = y.at[i].set(B[i, :] @ x)
        y = y.at[i].set(alpha * tmp[i] + beta * y[i])
        return (tmp, y)

    tmp, y = lax.fori_loop(0, n, body, (jnp.zeros(n), jnp.zeros(n)))
    return jnp.sum(y * y) / n
