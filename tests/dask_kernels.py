"""Functions the Dask tests run on worker processes: workers import them by reference (and
flowgrad reads their source there), so they live in a module on the workers' path."""
import os
import time

import numpy as np


def misfit(obs, theta, steps):
    """A member's squared misfit after ``steps`` steps of a nonlinear diffusion forced by ``theta``."""
    u = np.zeros_like(obs)
    for t in range(steps):
        u[1:-1] += 0.2 * (u[2:] - 2.0 * u[1:-1] + u[:-2]) + 0.05 * np.sin(theta[1:-1] + u[1:-1])
    return np.sum((u - obs) ** 2)


def columns(block, w, c):
    """A block of independent columns (rows of ``block``), weighted by ``w`` per variable."""
    return np.sum(np.tanh(block * w) ** 2) + c * np.sum(block ** 3)


def crash_once(marker, value, delay):
    """``value``, after ``delay`` seconds; the first time (no ``marker`` file yet) the worker
    process dies instead, as a crashed or killed worker does."""
    time.sleep(delay)
    if not os.path.exists(marker):
        with open(marker, "w"):
            pass
        os._exit(1)
    return value


def columns_t(block, w, c):
    """``columns`` of a block stored variables first (one column per member)."""
    return columns(block.T, w, c)
