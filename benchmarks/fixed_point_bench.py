"""A fixed point differentiated implicitly, against differentiating through its loop.

    python -m benchmarks.fixed_point_bench [--n 400] [--out benchmarks]

A nonlinear elliptic problem, ``-eps u'' + u + c tanh(u) = f`` on a 1-D grid with zero boundary
values, solved by Picard (Jacobi) iteration to a tolerance: ``flowgrad.fixed_point`` (the gradient
solves the adjoint system by BiCGSTAB, with vjps of one step) against the
same iteration written as a ``while`` loop and differentiated through (every iterate kept). The
gradient of ``sum(u**2)`` in the forcing ``f`` and in ``c``, also of the unmodified ``while`` loop
under ``grad(..., implicit_while=True)``, at two tolerances (so two iteration
counts): the time of one gradient (both backends), the peak memory of the call (numpy backend,
NumPy's allocations traced by ``tracemalloc``), and the largest difference between the two
gradients relative to the largest entry. Writes ``fixed_point_results.md`` into ``--out``.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys

import numpy as np

import flowgrad
from flowgrad.checkpoint.plan import fmt_bytes

from .run import Timer, peak_memory

R = 5.0         # eps / h^2: the Jacobi-Picard step contracts by about (2R + c) / (2R + 1)


def step(u, f, c):
    left = np.concatenate((np.zeros(1), u[:-1]))
    right = np.concatenate((u[1:], np.zeros(1)))
    return (R * (left + right) + f - c * np.tanh(u)) / (2.0 * R + 1.0)


def implicit(f, c, tol):
    u = flowgrad.fixed_point(step, np.zeros_like(f), f, c, tol=tol, max_iter=100000)
    return np.sum(u * u)


def through(f, c, tol):
    u = np.zeros_like(f)
    err = 1.0
    while err > tol:
        left = np.concatenate((np.zeros(1), u[:-1]))
        right = np.concatenate((u[1:], np.zeros(1)))
        new = (R * (left + right) + f - c * np.tanh(u)) / (2.0 * R + 1.0)
        err = np.max(np.abs(new - u))
        u = new
    return np.sum(u * u)


def iterations(f, c, tol):
    u, k = np.zeros_like(f), 0
    while True:
        new = step(u, f, c)
        k += 1
        if np.max(np.abs(new - u)) <= tol:
            return k
        u = new


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=400)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", default=None)
    opts = parser.parse_args(argv)
    x = np.linspace(0.0, 1.0, opts.n)
    f, c = np.sin(3 * np.pi * x) + 0.5, 0.5
    lines = ["# A fixed point differentiated implicitly", "",
             f"Picard iteration of -eps u'' + u + c tanh(u) = f, {opts.n} grid points, contraction about "
             f"{(2 * R + c) / (2 * R + 1):.3f} per step; the gradient of sum(u^2) in f and c. Machine: "
             f"{platform.machine()}, {os.cpu_count()} cores, Python {sys.version.split()[0]}, NumPy "
             f"{np.__version__}; one thread; medians of {opts.repeat} calls. "
             "`python -m benchmarks.fixed_point_bench`.", "",
             "Three gradients of the same problem: `fixed_point` (the step given to `flowgrad.fixed_point`), "
             "`implicit_while` (the unmodified `while` loop under `grad(..., implicit_while=True)`), and "
             "`through` (the `while` loop differentiated through, every iterate kept).", "",
             "| tolerance | iterations | backend | fixed_point (s) | implicit_while (s) | through (s) | "
             "fixed_point / through | implicit_while / through | peak memory: fixed_point, implicit_while, through | "
             "apart from through (relative): fixed_point, implicit_while |",
             "|---|---:|---|---:|---:|---:|---:|---:|---|---|"]
    for tol in (1e-8, 1e-12):
        k = iterations(f, c, tol)
        for backend in ("numpy", "native"):
            grads = [flowgrad.grad(implicit, wrt=(0, 1), backend=backend),
                     flowgrad.grad(through, wrt=(0, 1), backend=backend, implicit_while=True),
                     flowgrad.grad(through, wrt=(0, 1), backend=backend)]
            args = (f, c, tol)
            values = [g(*args) for g in grads]
            apart = [max(float(np.max(np.abs(np.asarray(x) - np.asarray(y))) / np.max(np.abs(np.asarray(y))))
                         for x, y in zip(v, values[2])) for v in values[:2]]
            timer = Timer(0, repeat=opts.repeat)
            times = [timer.run(g, lambda: args)[0]["median_s"] for g in grads]
            peaks = ", ".join(fmt_bytes(peak_memory(g, lambda: args)) for g in grads) if backend == "numpy" else "-"
            lines.append(f"| {tol:g} | {k} | {backend} | {times[0]:.4f} | {times[1]:.4f} | {times[2]:.4f} | "
                         f"{times[0] / times[2]:.2f} | {times[1] / times[2]:.2f} | {peaks} | "
                         f"{apart[0]:.1e}, {apart[1]:.1e} |")
    lines += ["", "Time ratios against differentiating through the loop (below 1: the implicit gradient is "
              "faster). The implicit gradients' memory does not grow with the iteration count; differentiating "
              "through the loop keeps every iterate."]
    text = "\n".join(lines) + "\n"
    print(text)
    if opts.out:
        with open(os.path.join(opts.out, "fixed_point_results.md"), "w") as fh:
            fh.write(text)


if __name__ == "__main__":
    main()
