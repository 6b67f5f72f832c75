"""lu: PolyBench LU -- in-place Doolittle LU without pivoting, triangular i/j loops with growing dot products."""
import numpy as np


def kernel(A):
    n = A.shape[0]
    for i in range(n):
        for j in range(i):
            A[i, j] -= A[i, :j] @ A[:j, j]
            A[i, j] /= A[j, j]
        for j in range(i, n):
            A[i, j] -= A[i, :i] @ A[:i, j]
    return np.sum(A * A) / n


WRT = ("A",)
SIZES = {"test": {"n": 10}, "bench": {"n": 150},
         # bench4, 4x the work: n^3: n x4^(1/3)
         "bench4": {"n": 238}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    n = SIZES[size]["n"]
    A = rng.standard_normal((n, n)) / np.sqrt(n) + 3.0 * np.eye(n)
    return (A,)


def jax_kernel(A):
    import jax.numpy as jnp
    from jax import lax
    A = jnp.asarray(A)
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
    return jnp.sum(A * A) / n
