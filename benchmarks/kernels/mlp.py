"""mlp: three-layer perceptron (ReLU, ReLU, softmax) with cross-entropy loss, via helper functions."""
import numpy as np


def relu(x):
    return np.maximum(x, 0.0)


def softmax(x):
    mx = np.max(x, axis=1, keepdims=True)
    e = np.exp(x - mx)
    return e / np.sum(e, axis=1, keepdims=True)


def kernel(x, w1, b1, w2, b2, w3, b3, target):
    h = relu(x @ w1 + b1)
    h = relu(h @ w2 + b2)
    out = softmax(h @ w3 + b3)
    return -np.sum(target * np.log(out)) / x.shape[0]


WRT = ("x", "w1", "b1", "w2", "b2", "w3", "b3")
SIZES = {"test": {"batch": 4, "d_in": 8, "h1": 10, "h2": 6, "d_out": 5},
         "bench": {"batch": 256, "d_in": 1024, "h1": 2048, "h2": 1024, "d_out": 10},
         # bench4, 4x the work: the batch x4
         "bench4": {"batch": 1024, "d_in": 1024, "h1": 2048, "h2": 1024, "d_out": 10}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    p = SIZES[size]
    x = rng.standard_normal((p["batch"], p["d_in"]))
    w1 = rng.standard_normal((p["d_in"], p["h1"])) / np.sqrt(p["d_in"])
    b1 = rng.standard_normal(p["h1"]) * 0.1
    w2 = rng.standard_normal((p["h1"], p["h2"])) / np.sqrt(p["h1"])
    b2 = rng.standard_normal(p["h2"]) * 0.1
    w3 = rng.standard_normal((p["h2"], p["d_out"])) / np.sqrt(p["h2"])
    b3 = rng.standard_normal(p["d_out"]) * 0.1
    t = rng.uniform(0.1, 1.0, (p["batch"], p["d_out"]))
    target = t / np.sum(t, axis=1, keepdims=True)
    return (x, w1, b1, w2, b2, w3, b3, target)


def jax_kernel(x, w1, b1, w2, b2, w3, b3, target):
    import jax.numpy as jnp
    h = jnp.maximum(x @ w1 + b1, 0.0)
    h = jnp.maximum(h @ w2 + b2, 0.0)
    z = h @ w3 + b3
    z = z - jnp.max(z, axis=1, keepdims=True)
    e = jnp.exp(z)
    out = e / jnp.sum(e, axis=1, keepdims=True)
    return -jnp.sum(target * jnp.log(out)) / x.shape[0]
