"""symm: PolyBench symm -- C = alpha*A@B + beta*C with symmetric A stored in its lower triangle; triangular k range."""
import numpy as np


def kernel(alpha, beta, C, A, B):
    m, n = C.shape
    for i in range(m):
        for j in range(n):
            C[:i, j] += alpha * B[i, j] * A[i, :i]
            temp2 = B[:i, j] @ A[i, :i]
            C[i, j] = beta * C[i, j] + alpha * B[i, j] * A[i, i] + alpha * temp2
    return np.sum(C * C) / (m * n)


WRT = ("alpha", "beta", "C", "A", "B")
SIZES = {"test": {"m": 6, "n": 8}, "bench": {"m": 100, "n": 120},
         # bench4, 4x the work: m^2*n: both x4^(1/3) each
         "bench4": {"m": 159, "n": 190}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    p = SIZES[size]
    m, n = p["m"], p["n"]
    C = rng.standard_normal((m, n))
    A = rng.standard_normal((m, m)) / np.sqrt(m)
    B = rng.standard_normal((m, n))
    return (1.5, 1.2, C, A, B)


def jax_kernel(alpha, beta, C, A, B):
    import jax.numpy as jnp
    C = jnp.asarray(C)
    A = jnp.asarray(A)
    B = jnp.asarray(B)
    m, n = C.shape
    # row i adds A[i, :i] to the rows above and takes A[i, :i] @ B[:i] for itself; no row
    # reads another row's result, so the loops are one product with the symmetric matrix
    # whose lower triangle is A's
    low = jnp.tril(A, -1)
    S = low + low.T + jnp.diag(jnp.diag(A))
    C = beta * C + alpha * (S @ B)
    return jnp.sum(C * C) / (m * n)
