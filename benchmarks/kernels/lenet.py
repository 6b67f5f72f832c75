"""lenet: LeNet-5 forward pass (NHWC) with convolutions as explicit loops over the kernel window, ReLU, 2x2 max-pooling via strided slices, dense head."""
import numpy as np


def conv2d(x, w, b):
    # x: (N, H, W, C), w: (K, K, C, F) -> valid convolution
    K = w.shape[0]
    N = x.shape[0]
    Ho = x.shape[1] - K + 1
    Wo = x.shape[2] - K + 1
    out = np.zeros((N, Ho, Wo, w.shape[3]))
    for i in range(K):
        for j in range(K):
            out += x[:, i:i + Ho, j:j + Wo, :] @ w[i, j]
    return out + b


def relu(x):
    return np.maximum(x, 0.0)


def maxpool2(x):
    a = np.maximum(x[:, 0::2, 0::2, :], x[:, 1::2, 0::2, :])
    b = np.maximum(x[:, 0::2, 1::2, :], x[:, 1::2, 1::2, :])
    return np.maximum(a, b)


def kernel(x, cw1, cb1, cw2, cb2, fw1, fb1, fw2, fb2, fw3, fb3, target):
    N = x.shape[0]
    h = maxpool2(relu(conv2d(x, cw1, cb1)))
    h = maxpool2(relu(conv2d(h, cw2, cb2)))
    h = h.reshape(N, h.shape[1] * h.shape[2] * h.shape[3])
    h = relu(h @ fw1 + fb1)
    h = relu(h @ fw2 + fb2)
    out = h @ fw3 + fb3
    d = out - target
    return np.sum(d * d) / N


WRT = ("x", "cw1", "cb1", "cw2", "cb2", "fw1", "fb1", "fw2", "fb2", "fw3", "fb3")
SIZES = {"test": {"N": 2, "H": 16, "c1": 4, "c2": 6, "f1": 12, "f2": 8, "classes": 5},
         "bench": {"N": 64, "H": 32, "c1": 6, "c2": 16, "f1": 120, "f2": 84, "classes": 10},
         # bench4, 4x the work: the batch x4
         "bench4": {"N": 256, "H": 32, "c1": 6, "c2": 16, "f1": 120, "f2": 84, "classes": 10}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    p = SIZES[size]
    N, H = p["N"], p["H"]
    s2 = ((H - 4) // 2 - 4) // 2
    flat = s2 * s2 * p["c2"]
    x = rng.standard_normal((N, H, H, 1))
    cw1 = rng.standard_normal((5, 5, 1, p["c1"])) / 5.0
    cb1 = rng.standard_normal(p["c1"]) * 0.1
    cw2 = rng.standard_normal((5, 5, p["c1"], p["c2"])) / np.sqrt(25.0 * p["c1"])
    cb2 = rng.standard_normal(p["c2"]) * 0.1
    fw1 = rng.standard_normal((flat, p["f1"])) / np.sqrt(flat)
    fb1 = rng.standard_normal(p["f1"]) * 0.1
    fw2 = rng.standard_normal((p["f1"], p["f2"])) / np.sqrt(p["f1"])
    fb2 = rng.standard_normal(p["f2"]) * 0.1
    fw3 = rng.standard_normal((p["f2"], p["classes"])) / np.sqrt(p["f2"])
    fb3 = rng.standard_normal(p["classes"]) * 0.1
    target = rng.standard_normal((N, p["classes"]))
    return (x, cw1, cb1, cw2, cb2, fw1, fb1, fw2, fb2, fw3, fb3, target)


def jax_kernel(x, cw1, cb1, cw2, cb2, fw1, fb1, fw2, fb2, fw3, fb3, target):
    import jax.numpy as jnp

    def conv2d(x, w, b):
        K = w.shape[0]
        Ho = x.shape[1] - K + 1
        Wo = x.shape[2] - K + 1
        out = jnp.zeros((x.shape[0], Ho, Wo, w.shape[3]))
        for i in range(K):          # static, unrolled at trace time
            for j in range(K):
                out = out + x[:, i:i + Ho, j:j + Wo, :] @ w[i, j]
        return out + b

    def maxpool2(x):
        a = jnp.maximum(x[:, 0::2, 0::2, :], x[:, 1::2, 0::2, :])
        b = jnp.maximum(x[:, 0::2, 1::2, :], x[:, 1::2, 1::2, :])
        return jnp.maximum(a, b)

    relu = lambda v: jnp.maximum(v, 0.0)
    N = x.shape[0]
    h = maxpool2(relu(conv2d(jnp.asarray(x), cw1, cb1)))
    h = maxpool2(relu(conv2d(h, cw2, cb2)))
    h = h.reshape(N, -1)
    h = relu(h @ fw1 + fb1)
    h = relu(h @ fw2 + fb2)
    d = h @ fw3 + fb3 - target
    return jnp.sum(d * d) / N
