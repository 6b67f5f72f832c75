"""rk4_ode: classical Runge-Kutta 4 integration of a neural-ODE-like system dy/dt = tanh(W y) - c*y, right-hand side in a helper called with keyword args."""
import numpy as np


def rhs(y, W, damping=0.0):
    return np.tanh(W @ y) - damping * y


def kernel(y0, W, damping, dt, n_steps):
    y = y0.copy()
    for s in range(n_steps):
        k1 = rhs(y, W, damping=damping)
        k2 = rhs(y + 0.5 * dt * k1, W, damping=damping)
        k3 = rhs(y + 0.5 * dt * k2, W, damping=damping)
        k4 = rhs(y + dt * k3, W, damping=damping)
        y = y + (dt / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
    return np.sum(y * y) / (y.shape[0] * y.shape[1])


WRT = ("y0", "W", "damping", "dt")
SIZES = {"test": {"n": 8, "batch": 3, "n_steps": 4}, "bench": {"n": 200, "batch": 64, "n_steps": 50},
         # bench4, 4x the work: n^2*batch*n_steps: the batch x4
         "bench4": {"n": 200, "batch": 256, "n_steps": 50}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    p = SIZES[size]
    y0 = rng.standard_normal((p["n"], p["batch"]))
    W = 1.5 * rng.standard_normal((p["n"], p["n"])) / np.sqrt(p["n"])
    return (y0, W, 0.5, 0.05, p["n_steps"])


def jax_kernel(y0, W, damping, dt, n_steps):
    import jax.numpy as jnp
    from jax import lax
    W = jnp.asarray(W)

    def rhs(y):
        return jnp.tanh(W @ y) - damping * y

    def step(s, y):
        k1 = rhs(y)
        k2 = rhs(y + 0.5 * dt * k1)
        k3 = rhs(y + 0.5 * dt * k2)
        k4 = rhs(y + dt * k3)
        return y + (dt / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)

    y = lax.fori_loop(0, n_steps, step, jnp.asarray(y0))
    return jnp.sum(y * y) / y.size
