"""cholesky: PolyBench Cholesky -- in-place lower-triangular factorisation with triangular loop bounds."""
import numpy as np


def kernel(A):
    n = A.shape[0]
    for i in range(n):
        for j in range(i):
            A[i, j] -= A[i, :j] @ A[j, :j]
            A[i, j] /= A[j, j]
        A[i, i] -= A[i, :i] @ A[i, :i]
        A[i, i] = np.sqrt(A[i, i])
    return np.sum(np.tril(A))


WRT = ("A",)
SIZES = {"test": {"n": 10}, "bench": {"n": 160},
         # bench4, 4x the work: n^3/3: n x4^(1/3)
         "bench4": {"n": 254}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    n = SIZES[size]["n"]
    M = rng.standard_normal((n, n))
    A = M @ M.T / n + np.eye(n)
    return (A,)


def jax_kernel(A):
    import jax.numpy as jnp
    from jax import lax
    A = jnp.asarray(A)
    n = A.shape[0]
    idx = jnp.arange(n)

    # The same multiply-adds with k (the dot products' index) outermost, so that each step is
    # a masked, full-size update: A[k, k] -> its square root, the column below it divided by
    # it, and its outer product subtracted from the trailing block.  (In the kernel's i, j
    # order each A[i, j] waits for A[i, :j]: n * (n + 1) / 2 sequential steps.)  The upper
    # triangle gets updates the kernel does not make; nothing reads it and tril drops it.
    def body(k, A):
        d = jnp.sqrt(A[k, k])
        col = jnp.where(idx > k, A[:, k] / d, 0.0)
        A = A.at[:, k].set(jnp.where(idx > k, col, jnp.where(idx == k, d, A[:, k])))
        return A - jnp.outer(col, col)

    A = lax.fori_loop(0, n, body, A)
    return jnp.sum(jnp.tril(A))
