"""crank_nicolson: 1-D heat equation with Crank-Nicolson steps; each step a scalar-loop Thomas tridiagonal solve in a helper writing into output arrays."""
import numpy as np


def thomas(a, b, c, d, cp, dp, x):
    n = d.shape[0]
    cp[0] = c / b
    dp[0] = d[0] / b
    for i in range(1, n):
        m = b - a * cp[i - 1]
        cp[i] = c / m
        dp[i] = (d[i] - a * dp[i - 1]) / m
    x[n - 1] = dp[n - 1]
    for i in range(n - 2, -1, -1):
        x[i] = dp[i] - cp[i] * x[i + 1]


def kernel(u, kappa, n_steps):
    n = u.shape[0]
    dx = 1.0 / (n + 1)
    dt = 0.5 * dx
    r = kappa * dt / (dx * dx)
    cp = np.zeros(n)
    dp = np.zeros(n)
    for t in range(n_steps):
        rhs = (1.0 - r) * u
        rhs[1:] += 0.5 * r * u[:-1]
        rhs[:-1] += 0.5 * r * u[1:]
        thomas(-0.5 * r, 1.0 + r, -0.5 * r, rhs, cp, dp, u)
    return np.sum(u * u) / n


WRT = ("u", "kappa")
SIZES = {"test": {"n": 12, "n_steps": 3}, "bench": {"n": 1000, "n_steps": 30},
         # bench4, 4x the work: n*n_steps: the grid x4, steps kept
         "bench4": {"n": 4000, "n_steps": 30}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    p = SIZES[size]
    u = rng.uniform(0.0, 1.0, p["n"])
    return (u, 0.8, p["n_steps"])


def jax_kernel(u, kappa, n_steps):
    import jax.numpy as jnp
    from jax import lax
    u = jnp.asarray(u)
    n = u.shape[0]
    dx = 1.0 / (n + 1)
    dt = 0.5 * dx
    r = kappa * dt / (dx * dx)
    a = -0.5 * r
    b = 1.0 + r
    c = -0.5 * r

    def fwd(i, s):
        cp, dp, d = s
        m = b - a * cp[i - 1]
        return (cp.at[i].set(c / m), dp.at[i].set((d[i] - a * dp[i - 1]) / m), d)

    def bwd(ii, s):
        x, cp, dp = s
        i = n - 2 - ii
        return (x.at[i].set(dp[i] - cp[i] * x[i + 1]), cp, dp)

    def step(t, s):
        u, cp, dp = s
        rhs = (1.0 - r) * u
        rhs = rhs.at[1:].add(0.5 * r * u[:-1])
        rhs = rhs.at[:-1].add(0.5 * r * u[1:])
        cp = cp.at[0].set(c / b)
        dp = dp.at[0].set(rhs[0] / b)
        cp, dp, _ = lax.fori_loop(1, n, fwd, (cp, dp, rhs))
        u = u.at[n - 1].set(dp[n - 1])
        u, cp, dp = lax.fori_loop(0, n - 1, bwd, (u, cp, dp))
        return (u, cp, dp)

    u, cp, dp = lax.fori_loop(0, n_steps, step, (u, jnp.zeros(n), jnp.zeros(n)))
    return jnp.sum(u * u) / n
