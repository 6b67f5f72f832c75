"""nbody: softened gravitational N-body with leapfrog (kick-drift-kick); pairwise forces in a triangular i-loop over j > i slices, helper mutates acc in place."""
import numpy as np

G = 1.0
SOFT = 0.1


def accelerations(pos, mass, acc):
    n = pos.shape[0]
    acc[:, :] = 0.0
    for i in range(n - 1):
        d = pos[i + 1:, :] - pos[i, :]
        r2 = np.sum(d * d, axis=1) + SOFT * SOFT
        inv3 = r2 ** -1.5
        f = d * inv3[:, None]
        acc[i, :] += G * np.sum(mass[i + 1:, None] * f, axis=0)
        acc[i + 1:, :] -= G * mass[i] * f


def energy(pos, vel, mass):
    n = pos.shape[0]
    ke = 0.5 * np.sum(mass[:, None] * vel * vel)
    pe = 0.0
    for i in range(n - 1):
        d = pos[i + 1:, :] - pos[i, :]
        r = np.sqrt(np.sum(d * d, axis=1) + SOFT * SOFT)
        pe -= G * mass[i] * np.sum(mass[i + 1:] / r)
    return ke + pe


def kernel(pos, vel, mass, dt, n_steps):
    acc = np.zeros_like(pos)
    accelerations(pos, mass, acc)
    for s in range(n_steps):
        vel += acc * (dt / 2.0)
        pos += vel * dt
        accelerations(pos, mass, acc)
        vel += acc * (dt / 2.0)
    return energy(pos, vel, mass) + np.mean(pos * pos)


WRT = ("pos", "vel", "mass", "dt")
SIZES = {"test": {"n": 8, "n_steps": 3}, "bench": {"n": 200, "n_steps": 8}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    p = SIZES[size]
    n = p["n"]
    pos = rng.standard_normal((n, 3))
    vel = 0.3 * rng.standard_normal((n, 3))
    mass = rng.uniform(0.5, 1.5, n) / n
    return (pos, vel, mass, 0.01, p["n_steps"])


JAX_NOTE = ("pairwise loop over j > i uses slices pos[i + 1:] whose length depends on the loop index; "
            "JAX needs static shapes, so it must be rewritten as an all-pairs masked computation")
