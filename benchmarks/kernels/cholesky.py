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
SIZES = {"test": {"n": 10}, "bench": {"n": 160}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    n = SIZES[size]["n"]
    M = rng.standard_normal((n, n))
    A = M @ M.T / n + np.eye(n)
    return (A,)


JAX_NOTE = ("inner loop and slice bounds depend on the outer index (A[i, :j]); lax.fori_loop needs "
            "static slice shapes, so JAX needs a masked/vectorised rewrite of the algorithm")
