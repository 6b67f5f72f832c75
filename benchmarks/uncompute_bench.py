"""Uncomputation on an invertible time loop: memory, time and the rounding it costs.

    python -m benchmarks.uncompute_bench [--n 2000] [--steps 2000] [--out benchmarks]

A chain of pendulums integrated by Stormer-Verlet (leapfrog): each step updates the momenta by a
value of the positions and the positions by a value of the momenta, so every update can be run
backwards. The gradient in the initial state and both parameters, with every overwritten value
kept on a tape (the default) and with ``allow_uncompute=True`` (the backward sweep runs each update
backwards instead): the peak memory of one gradient call (numpy backend, NumPy's allocations
traced by ``tracemalloc``), the tape pushes left in the generated program, the median time on both
backends, and the largest difference between the two gradients relative to the largest entry,
against the bound the README states. Writes ``uncompute_results.md`` into ``--out``.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys

import numpy as np

import flowgrad
from flowgrad.checkpoint.plan import fmt_bytes

from .run import Timer, fresh, peak_memory


def leapfrog(q, p, dt, k, steps):
    for t in range(steps):
        p[1:-1] += dt * k * (q[2:] - 2.0 * q[1:-1] + q[:-2]) - dt * 0.1 * np.sin(q[1:-1])
        q += dt * p
    return np.sum(q ** 2) + 0.5 * np.sum(p ** 2)


WRT = (0, 1, 2, 3)


def _inputs(n, steps):
    rng = np.random.default_rng(0)
    return rng.normal(size=n), rng.normal(size=n), 0.01, 1.3, steps


def _pushes(g, args):
    return sum(line.count(".append(") for line in g.source(*args).split("\n"))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", default=None)
    opts = parser.parse_args(argv)
    args = _inputs(opts.n, opts.steps)
    state = 2 * opts.n * 8
    rows = []
    grads = {}
    for backend in ("numpy", "native"):
        for uncompute in (False, True):
            g = flowgrad.grad(leapfrog, wrt=WRT, backend=backend, allow_uncompute=uncompute)
            grads[backend, uncompute] = g(*fresh(args))
            timing, _ = Timer(0, repeat=opts.repeat).run(g, lambda: fresh(args))
            rows.append((backend, uncompute, timing["median_s"],
                         peak_memory(g, lambda: fresh(args)) if backend == "numpy" else None,
                         _pushes(g, args) if backend == "numpy" else None))
    lines = ["# Uncomputation on an invertible time loop", "",
             f"Stormer-Verlet chain, n = {opts.n} pendulums, {opts.steps} steps; the gradient in q, p, dt "
             f"and k. State: {fmt_bytes(state)}. Machine: {platform.machine()}, {os.cpu_count()} cores, "
             f"Python {sys.version.split()[0]}, NumPy {np.__version__}; one thread; medians of "
             f"{opts.repeat} calls. `python -m benchmarks.uncompute_bench`.", "",
             "| backend | allow_uncompute | time (s) | peak memory of the call | tape pushes in the program |",
             "|---|---|---:|---:|---:|"]
    for backend, uncompute, t, peak, pushes in rows:
        lines.append(f"| {backend} | {uncompute} | {t:.3f} | {fmt_bytes(peak) if peak is not None else '-'} | "
                     f"{pushes if pushes is not None else '-'} |")
    lines.append("")
    eps = np.finfo(np.float64).eps
    for backend in ("numpy", "native"):
        worst = 0.0
        for a, b in zip(grads[backend, False], grads[backend, True]):
            a, b = np.asarray(a), np.asarray(b)
            worst = max(worst, float(np.max(np.abs(a - b)) / np.max(np.abs(a))))
        lines.append(f"- {backend}: largest difference between the two gradients, relative to the largest "
                     f"entry: {worst:.2e} ({worst / eps:.0f} ulps of 1; the README's bound for "
                     f"{opts.steps} steps of two updates: about 2 x {2 * opts.steps} ulps of the state, "
                     "before the dynamics amplify it)")
    time_ratio = {b: dict(((u, t) for bb, u, t, _, _ in rows if bb == b)) for b in ("numpy", "native")}
    mem = {u: p for b, u, _, p, _ in rows if b == "numpy"}
    lines += ["", f"Peak memory with uncompute / with tapes (numpy backend): {mem[True] / mem[False]:.3f}. "
              f"Time with uncompute / with tapes: numpy {time_ratio['numpy'][True] / time_ratio['numpy'][False]:.2f}, "
              f"native {time_ratio['native'][True] / time_ratio['native'][False]:.2f}."]
    text = "\n".join(lines) + "\n"
    print(text)
    if opts.out:
        with open(os.path.join(opts.out, "uncompute_results.md"), "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
