"""adi: PolyBench ADI -- alternating-direction implicit 2-D heat solver; tridiagonal forward/backward recurrences per sweep, vectorised across the other axis."""
import numpy as np


def kernel(u, tsteps):
    n = u.shape[0]
    v = np.zeros_like(u)
    p = np.zeros_like(u)
    q = np.zeros_like(u)
    dx = 1.0 / n
    dy = 1.0 / n
    dt = 1.0 / tsteps
    mul1 = 2.0 * dt / (dx * dx)
    mul2 = 1.0 * dt / (dy * dy)
    a = -mul1 / 2.0
    b = 1.0 + mul1
    c = a
    d = -mul2 / 2.0
    e = 1.0 + mul2
    f = d
    for t in range(tsteps):
        # column sweep: implicit in the first axis
        v[0, 1:n - 1] = 1.0
        p[1:n - 1, 0] = 0.0
        q[1:n - 1, 0] = v[0, 1:n - 1]
        for j in range(1, n - 1):
            den = a * p[1:n - 1, j - 1] + b
            p[1:n - 1, j] = -c / den
            q[1:n - 1, j] = (-d * u[j, 0:n - 2] + (1.0 + 2.0 * d) * u[j, 1:n - 1]
                             - f * u[j, 2:n] - a * q[1:n - 1, j - 1]) / den
        v[n - 1, 1:n - 1] = 1.0
        for j in range(n - 2, 0, -1):
            v[j, 1:n - 1] = p[1:n - 1, j] * v[j + 1, 1:n - 1] + q[1:n - 1, j]
        # row sweep: implicit in the second axis
        u[1:n - 1, 0] = 1.0
        p[1:n - 1, 0] = 0.0
        q[1:n - 1, 0] = u[1:n - 1, 0]
        for j in range(1, n - 1):
            den = d * p[1:n - 1, j - 1] + e
            p[1:n - 1, j] = -f / den
            q[1:n - 1, j] = (-a * v[0:n - 2, j] + (1.0 + 2.0 * a) * v[1:n - 1, j]
                             - c * v[2:n, j] - d * q[1:n - 1, j - 1]) / den
        u[1:n - 1, n - 1] = 1.0
        for j in range(n - 2, 0, -1):
            u[1:n - 1, j] = p[1:n - 1, j] * u[1:n - 1, j + 1] + q[1:n - 1, j]
    return np.sum(u * u) / (n * n)


WRT = ("u",)
SIZES = {"test": {"n": 10, "tsteps": 3}, "bench": {"n": 150, "tsteps": 10},
         # bench4, 4x the work: n^2*tsteps: interior 148 -> 296 a side, steps kept
         "bench4": {"n": 298, "tsteps": 10}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    p = SIZES[size]
    n = p["n"]
    u = rng.uniform(0.0, 1.0, (n, n))
    return (u, p["tsteps"])


def jax_kernel(u, tsteps):
    import jax.numpy as jnp
    from jax import lax
    u = jnp.asarray(u)
    n = u.shape[0]
    dx = 1.0 / n
    dy = 1.0 / n
    dt = 1.0 / tsteps
    mul1 = 2.0 * dt / (dx * dx)
    mul2 = 1.0 * dt / (dy * dy)
    a = -mul1 / 2.0
    b = 1.0 + mul1
    c = a
    d = -mul2 / 2.0
    e = 1.0 + mul2
    f = d

    def col_fwd(j, pq):
        p, q, u = pq
        den = a * p[1:n - 1, j - 1] + b
        p = p.at[1:n - 1, j].set(-c / den)
        q = q.at[1:n - 1, j].set((-d * u[j, 0:n - 2] + (1.0 + 2.0 * d) * u[j, 1:n - 1]
                                  - f * u[j, 2:n] - a * q[1:n - 1, j - 1]) / den)
        return (p, q, u)

    def col_bwd(jj, pv):
        p, q, v = pv
        j = n - 2 - jj
        v = v.at[j, 1:n - 1].set(p[1:n - 1, j] * v[j + 1, 1:n - 1] + q[1:n - 1, j])
        return (p, q, v)

    def row_fwd(j, pq):
        p, q, v = pq
        den = d * p[1:n - 1, j - 1] + e
        p = p.at[1:n - 1, j].set(-f / den)
        q = q.at[1:n - 1, j].set((-a * v[0:n - 2, j] + (1.0 + 2.0 * a) * v[1:n - 1, j]
                                  - c * v[2:n, j] - d * q[1:n - 1, j - 1]) / den)
        return (p, q, v)

    def row_bwd(jj, pu):
        p, q, u = pu
        j = n - 2 - jj
        u = u.at[1:n - 1, j].set(p[1:n - 1, j] * u[1:n - 1, j + 1] + q[1:n - 1, j])
        return (p, q, u)

    def step(t, state):
        u, v, p, q = state
        v = v.at[0, 1:n - 1].set(1.0)
        p = p.at[1:n - 1, 0].set(0.0)
        q = q.at[1:n - 1, 0].set(v[0, 1:n - 1])
        p, q, u = lax.fori_loop(1, n - 1, col_fwd, (p, q, u))
        v = v.at[n - 1, 1:n - 1].set(1.0)
        p, q, v = lax.fori_loop(0, n - 2, col_bwd, (p, q, v))
        u = u.at[1:n - 1, 0].set(1.0)
        p = p.at[1:n - 1, 0].set(0.0)
        q = q.at[1:n - 1, 0].set(u[1:n - 1, 0])
        p, q, v = lax.fori_loop(1, n - 1, row_fwd, (p, q, v))
        u = u.at[1:n - 1, n - 1].set(1.0)
        p, q, u = lax.fori_loop(0, n - 2, row_bwd, (p, q, u))
        return (u, v, p, q)

    z = jnp.zeros_like(u)
    u, v, p, q = lax.fori_loop(0, tsteps, step, (u, z, z, z))
    return jnp.sum(u * u) / (n * n)
