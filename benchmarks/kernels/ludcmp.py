"""ludcmp: PolyBench ludcmp -- LU factorisation followed by forward and backward substitution (reverse range)."""
import numpy as np


def kernel(A, b):
    n = A.shape[0]
    for i in range(n):
        for j in range(i):
            w = A[i, j] - A[i, :j] @ A[:j, j]
            A[i, j] = w / A[j, j]
        for j in range(i, n):
            A[i, j] = A[i, j] - A[i, :i] @ A[:i, j]
    y = np.zeros(n)
    for i in range(n):
        y[i] = b[i] - A[i, :i] @ y[:i]
    x = np.zeros(n)
    for i in range(n - 1, -1, -1):
        x[i] = (y[i] - A[i, i + 1:] @ x[i + 1:]) / A[i, i]
    return np.sum(x * x) + np.sum(x)


WRT = ("A", "b")
SIZES = {"test": {"n": 10}, "bench": {"n": 150},
         # bench4, 4x the work: n^3: n x4^(1/3)
         "bench4": {"n": 238}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    n = SIZES[size]["n"]
    A = rng.standard_normal((n, n)) / np.sqrt(n) + 3.0 * np.eye(n)
    b = rng.standard_normal(n)
    return (A, b)


def jax_kernel(A, b):
    import jax.numpy as jnp
    from jax import lax
    A = jnp.asarray(A)
    b = jnp.asarray(b)
    n = A.shape[0]
    idx = jnp.arange(n)

    # The same multiply-adds with k (the dot products' index) outermost, so that each step is
    # a masked, full-size update: the column below A[k, k] divided by it, and the outer product
    # of that column with row k right of the diagonal subtracted from the trailing block.  (In
    # the kernel's i, j order each A[i, j] below the diagonal waits for A[i, :j]: n * n
    # sequential steps.)
    def body(k, A):
        low = idx > k
        lcol = jnp.where(low, A[:, k] / A[k, k], 0.0)
        urow = jnp.where(low, A[k], 0.0)
        A = A.at[:, k].set(jnp.where(low, lcol, A[:, k]))
        return A - jnp.outer(lcol, urow)

    A = lax.fori_loop(0, n, body, A)
    # substitutions: entries of y (x) not yet computed are still 0, so full rows need no mask
    y = lax.fori_loop(0, n, lambda i, y: y.at[i].set(b[i] - A[i] @ y), jnp.zeros(n))

    def back(t, x):
        i = n - 1 - t
        return x.at[i].set((y[i] - A[i] @ x) / A[i, i])

    x = lax.fori_loop(0, n, back, jnp.zeros(n))
    return jnp.sum(x * x) + jnp.sum(x)
