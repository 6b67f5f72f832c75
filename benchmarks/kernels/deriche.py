"""deriche: PolyBench Deriche edge detector -- causal/anti-causal recursive IIR filters along rows then columns (carried state vectors, views)."""
import numpy as np


def kernel(imgIn, alpha):
    w, h = imgIn.shape
    ea = np.exp(-alpha)
    e2a = np.exp(-2.0 * alpha)
    k = (1.0 - ea) * (1.0 - ea) / (1.0 + 2.0 * alpha * ea - np.exp(2.0 * alpha))
    a1 = k
    a5 = k
    a2 = k * ea * (alpha - 1.0)
    a6 = a2
    a3 = k * ea * (alpha + 1.0)
    a7 = a3
    a4 = -k * e2a
    a8 = a4
    b1 = 2.0 ** (-alpha)
    b2 = -e2a
    c1 = 1.0
    c2 = 1.0
    y1 = np.zeros_like(imgIn)
    y2 = np.zeros_like(imgIn)

    # horizontal causal pass
    ym1 = np.zeros(w)
    ym2 = np.zeros(w)
    xm1 = np.zeros(w)
    for j in range(h):
        y1[:, j] = a1 * imgIn[:, j] + a2 * xm1 + b1 * ym1 + b2 * ym2
        xm1 = imgIn[:, j]
        ym2 = ym1
        ym1 = y1[:, j]
    # horizontal anti-causal pass
    yp1 = np.zeros(w)
    yp2 = np.zeros(w)
    xp1 = np.zeros(w)
    xp2 = np.zeros(w)
    for j in range(h - 1, -1, -1):
        y2[:, j] = a3 * xp1 + a4 * xp2 + b1 * yp1 + b2 * yp2
        xp2 = xp1
        xp1 = imgIn[:, j]
        yp2 = yp1
        yp1 = y2[:, j]
    imgOut = c1 * (y1 + y2)

    # vertical causal pass
    tm1 = np.zeros(h)
    ym1 = np.zeros(h)
    ym2 = np.zeros(h)
    for i in range(w):
        y1[i, :] = a5 * imgOut[i, :] + a6 * tm1 + b1 * ym1 + b2 * ym2
        tm1 = imgOut[i, :]
        ym2 = ym1
        ym1 = y1[i, :]
    # vertical anti-causal pass
    tp1 = np.zeros(h)
    tp2 = np.zeros(h)
    yp1 = np.zeros(h)
    yp2 = np.zeros(h)
    for i in range(w - 1, -1, -1):
        y2[i, :] = a7 * tp1 + a8 * tp2 + b1 * yp1 + b2 * yp2
        tp2 = tp1
        tp1 = imgOut[i, :]
        yp2 = yp1
        yp1 = y2[i, :]
    imgOut = c2 * (y1 + y2)
    return np.sum(imgOut * imgOut) / (w * h)


WRT = ("imgIn", "alpha")
SIZES = {"test": {"w": 8, "h": 10}, "bench": {"w": 500, "h": 400},
         # bench4, 4x the work: w*h: both doubled
         "bench4": {"w": 1000, "h": 800}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    p = SIZES[size]
    imgIn = rng.uniform(0.0, 1.0, (p["w"], p["h"]))
    return (imgIn, 0.25)


def jax_kernel(imgIn, alpha):
    import jax.numpy as jnp
    from jax import lax
    imgIn = jnp.asarray(imgIn)
    w, h = imgIn.shape
    ea = jnp.exp(-alpha)
    e2a = jnp.exp(-2.0 * alpha)
    k = (1.0 - ea) * (1.0 - ea) / (1.0 + 2.0 * alpha * ea - jnp.exp(2.0 * alpha))
    a1 = k
    a5 = k
    a2 = k * ea * (alpha - 1.0)
    a6 = a2
    a3 = k * ea * (alpha + 1.0)
    a7 = a3
    a4 = -k * e2a
    a8 = a4
    b1 = 2.0 ** (-alpha)
    b2 = -e2a

    def h_causal(j, c):
        y1, xm1, ym1, ym2 = c
        yj = a1 * imgIn[:, j] + a2 * xm1 + b1 * ym1 + b2 * ym2
        return (y1.at[:, j].set(yj), imgIn[:, j], yj, ym1)

    def h_anti(jj, c):
        y2, xp1, xp2, yp1, yp2 = c
        j = h - 1 - jj
        yj = a3 * xp1 + a4 * xp2 + b1 * yp1 + b2 * yp2
        return (y2.at[:, j].set(yj), imgIn[:, j], xp1, yj, yp1)

    zw = jnp.zeros(w)
    y1 = lax.fori_loop(0, h, h_causal, (jnp.zeros_like(imgIn), zw, zw, zw))[0]
    y2 = lax.fori_loop(0, h, h_anti, (jnp.zeros_like(imgIn), zw, zw, zw, zw))[0]
    imgOut = y1 + y2

    def v_causal(i, c):
        y1, tm1, ym1, ym2 = c
        yi = a5 * imgOut[i, :] + a6 * tm1 + b1 * ym1 + b2 * ym2
        return (y1.at[i, :].set(yi), imgOut[i, :], yi, ym1)

    def v_anti(ii, c):
        y2, tp1, tp2, yp1, yp2 = c
        i = w - 1 - ii
        yi = a7 * tp1 + a8 * tp2 + b1 * yp1 + b2 * yp2
        return (y2.at[i, :].set(yi), imgOut[i, :], tp1, yi, yp1)

    zh = jnp.zeros(h)
    y1 = lax.fori_loop(0, w, v_causal, (y1, zh, zh, zh))[0]
    y2 = lax.fori_loop(0, w, v_anti, (y2, zh, zh, zh, zh))[0]
    imgOut = y1 + y2
    return jnp.sum(imgOut * imgOut) / (w * h)
