"""The shipped example: gradients of an explicit heat-equation simulation, checked end to end."""
from __future__ import annotations

import numpy as np

import flowgrad


def heat(u, kappa, steps):
    """Explicit finite differences for u_t = kappa u_xx, in place, then an energy-like loss."""
    for t in range(steps):
        u[1:-1] += kappa * (u[2:] - 2.0 * u[1:-1] + u[:-2])
    return np.sum(u * u)


def run(n: int = 64, steps: int = 200, seed: int = 0) -> bool:
    """Differentiate ``heat`` w.r.t. the initial state and the diffusivity; compare to finite differences."""
    rng = np.random.default_rng(seed)
    u0 = np.sin(np.linspace(0.0, np.pi, n)) + 0.1 * rng.standard_normal(n)
    kappa = 0.2
    vg = flowgrad.value_and_grad(heat, wrt=("u", "kappa"))
    value, (g_u, g_kappa) = vg(u0, kappa, steps)
    print(f"heat: n={n}, steps={steps}, loss={value:.12g} (NumPy: {heat(u0.copy(), kappa, steps):.12g})")
    readable = flowgrad.value_and_grad(heat, wrt=("u", "kappa"), backend="numpy")
    src = readable.source(u0, kappa, steps).splitlines()
    start = next(k for k, line in enumerate(src) if "for t in reversed" in line)
    print(f"backend: {vg.backend}; backward time loop of the reference (numpy backend) gradient program:")
    print("\n".join(src[start:start + 9]))
    ok = abs(value - heat(u0.copy(), kappa, steps)) <= 1e-12 * abs(value)
    eps = 1e-6
    for k in range(3):
        d = rng.standard_normal(n)
        dk = float(rng.standard_normal())
        fd = (heat(u0 + eps * d, kappa + eps * dk, steps) - heat(u0 - eps * d, kappa - eps * dk, steps)) / (2 * eps)
        an = float(np.dot(g_u, d) + g_kappa * dk)
        rel = abs(fd - an) / max(abs(fd), 1e-12)
        ok &= rel < 1e-6
        print(f"direction {k}: finite differences {fd:+.10e}, flowgrad {an:+.10e}, relative error {rel:.1e}")
    print("gradient check:", "PASSED" if ok else "FAILED")
    return ok
