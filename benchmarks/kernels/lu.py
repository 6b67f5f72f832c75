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
SIZES = {"test": {"n": 10}, "bench": {"n": 150}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    n = SIZES[size]["n"]
    A = rng.standard_normal((n, n)) / np.sqrt(n) + 3.0 * np.eye(n)
    return (A,)


JAX_NOTE = ("loop ranges and slices (range(i), A[i, :j]) depend on the outer index; lax.fori_loop "
            "needs static shapes, so JAX needs a masked rewrite")
