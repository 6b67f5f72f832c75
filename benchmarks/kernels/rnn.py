"""rnn: Elman recurrent network over a time loop; input and state concatenated each step, scalar loss accumulator."""
import numpy as np


def kernel(xs, h0, W, b, Wy):
    T = xs.shape[0]
    h = h0.copy()
    loss = 0.0
    for t in range(T):
        z = np.concatenate((xs[t], h), axis=1)
        h = np.tanh(z @ W + b)
        y = h @ Wy
        loss += np.sum(y * y)
    return loss / T


WRT = ("xs", "h0", "W", "b", "Wy")
SIZES = {"test": {"T": 4, "batch": 3, "D": 5, "H": 6, "O": 2},
         "bench": {"T": 60, "batch": 64, "D": 64, "H": 128, "O": 16},
         # bench4, 4x the work: the batch x4
         "bench4": {"T": 60, "batch": 256, "D": 64, "H": 128, "O": 16}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    p = SIZES[size]
    D, H = p["D"], p["H"]
    xs = rng.standard_normal((p["T"], p["batch"], D))
    h0 = 0.5 * rng.standard_normal((p["batch"], H))
    W = rng.standard_normal((D + H, H)) / np.sqrt(D + H)
    b = 0.1 * rng.standard_normal(H)
    Wy = rng.standard_normal((H, p["O"])) / np.sqrt(H)
    return (xs, h0, W, b, Wy)


def jax_kernel(xs, h0, W, b, Wy):
    import jax.numpy as jnp
    from jax import lax
    xs = jnp.asarray(xs)

    def step(h, x):
        h = jnp.tanh(jnp.concatenate((x, h), axis=1) @ W + b)
        y = h @ Wy
        return h, jnp.sum(y * y)

    h, losses = lax.scan(step, jnp.asarray(h0), xs)
    return jnp.sum(losses) / xs.shape[0]
