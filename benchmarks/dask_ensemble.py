"""An ensemble of simulation gradients: one process against a Dask LocalCluster.

    python -m benchmarks.dask_ensemble [--members 64] [--workers 2] [--rounds 3] [--out benchmarks]

Each member is a run of ``nonlinear_diffusion_2d`` (explicit 2-D diffusion whose diffusivity
grows with the field, updated in place for many steps) from its own initial field, all members
sharing the diffusivity ``kappa``: the data-assimilation case. One round is the value of the
ensemble sum and its gradient in every member's initial field and in the shared ``kappa``
(native backend, one thread per process): (a) in this process, one member after another, a
plain loop of ``flowgrad.value_and_grad``; (b) ``flowgrad.dask.ensemble_value_and_grad`` on a
``LocalCluster`` of worker processes with one thread each, the kappa gradients summed on the
workers. Reported apart: the cluster's start-up, its first round (each worker captures the
kernel and loads the compiled code from the on-disk cache this process filled), and warm rounds
(medians). The cluster's gradients are checked against this process's: equal to the same
pairwise sum computed here bit for bit, and to the plain loop's sum to rounding. Writes
``dask_results.md`` into ``--out``.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

import numpy as np

import flowgrad
import flowgrad.dask as fd

from .kernels import nonlinear_diffusion_2d as kernel_module

KERNEL = kernel_module.kernel


def members(count, n, seed=0):
    rng = np.random.default_rng(seed)
    base = rng.uniform(0.0, 0.5, (n, n))
    return [(base + 0.05 * rng.standard_normal((n, n)),) for _ in range(count)]


def sequential(vg, ensemble, kappa, steps):
    """One round in this process: ``(value, ([gu per member], g_kappa))``, summed in member order."""
    value, gus, gk = 0.0, [], 0.0
    for (u,) in ensemble:
        v, (gu, g) = vg(u, kappa, steps)
        value, gk = value + v, gk + g
        gus.append(gu)
    return value, (gus, gk)


def timed(call):
    start = time.perf_counter()
    out = call()
    return time.perf_counter() - start, out


def apart(a, b):
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=64)
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--steps", type=int, default=250)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=None)
    opts = parser.parse_args(argv)
    from distributed import Client, LocalCluster, get_task_stream

    ensemble = members(opts.members, opts.n)
    kappa, steps = 0.1, opts.steps
    load = os.getloadavg()[0]

    # (a) this process: the first call captures and compiles (or loads the cached code), then rounds
    vg = flowgrad.value_and_grad(KERNEL, wrt=("u", "kappa"), backend="native")
    first_call, _ = timed(lambda: vg(ensemble[0][0], kappa, steps))
    one = statistics.median(timed(lambda: vg(ensemble[0][0], kappa, steps))[0] for _ in range(5))
    seq_times, seq = [], None
    for _ in range(opts.rounds):
        t, seq = timed(lambda: sequential(vg, ensemble, kappa, steps))
        seq_times.append(t)
    here = fd.ensemble_value_and_grad(KERNEL, ensemble, shared=(kappa, steps), wrt=("u", "kappa"),
                                      backend="native")          # no client yet: this process, the same tree

    # (b) the cluster: workers share this process's code cache and thread settings
    env = {k: os.environ[k] for k in ("FLOWGRAD_CACHE_DIR", "NUMBA_NUM_THREADS", "OMP_NUM_THREADS",
                                      "OPENBLAS_NUM_THREADS") if k in os.environ}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))      # workers import the kernel module
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    start_up, (cluster, client) = timed(lambda: _start(LocalCluster, Client, opts.workers, env))
    try:
        def cluster_round():
            return fd.ensemble_value_and_grad(KERNEL, ensemble, shared=(kappa, steps), wrt=("u", "kappa"),
                                              backend="native", client=client)
        first_round, got = timed(cluster_round)
        warm_times = []
        with get_task_stream(client) as stream:
            for _ in range(opts.rounds):
                t, got = timed(cluster_round)
                warm_times.append(t)
        on_worker = statistics.median(
            ss["stop"] - ss["start"] for task in stream.data if str(task["key"]).startswith("_member_task")
            for ss in task["startstops"] if ss["action"] == "compute")
    finally:
        client.close()
        cluster.close()

    identical = got[0] == here[0] and all(np.array_equal(a, b) for a, b in zip(got[1][0], here[1][0])) and \
        got[1][1] == here[1][1]
    err = max(apart(got[0], seq[0]), apart(got[1][1], seq[1][1]),
              max(apart(a, b) for a, b in zip(got[1][0], seq[1][0])))
    if not identical or err > 1e-12:
        raise SystemExit(f"the cluster's gradients differ from this process's (identical to the same tree: "
                         f"{identical}; apart from the plain loop: {err:.1e})")
    seq_s, warm_s = statistics.median(seq_times), statistics.median(warm_times)

    lines = [
        "# An ensemble of simulation gradients on Dask", "",
        f"{opts.members} members of `nonlinear_diffusion_2d` ({opts.n}x{opts.n} grid, {steps} steps, every step "
        "kept on the tape), each from its own initial field, sharing `kappa`; one round is the value of the "
        "ensemble sum and its gradient in each member's initial field and in `kappa` (native backend). "
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, shared with other work (1-minute load "
        f"{load:.2f} at the start), Python {sys.version.split()[0]}, NumPy {np.__version__}; one thread per "
        f"process (the native backend's loops are serial by default). Cluster: `LocalCluster(n_workers="
        f"{opts.workers}, processes=True, threads_per_worker=1)`, the workers loading compiled code from the "
        f"on-disk cache this process filled. Medians of {opts.rounds} rounds. `python -m "
        "benchmarks.dask_ensemble --out benchmarks`.", "",
        "| what | seconds | against one process's round |",
        "|---|---:|---:|",
        f"| one gradient, this process (first call: {first_call:.2f} s) | {one:.4f} | - |",
        f"| one gradient on a worker, warm rounds (Dask's task stream) | {on_worker:.4f} | - |",
        f"| one round in this process ({opts.members} gradients, a plain loop) | {seq_s:.2f} | 1.00 |",
        f"| cluster start-up ({opts.workers} worker processes) | {start_up:.2f} | {start_up / seq_s:.2f} |",
        f"| first round on the cluster (workers capture, load cached code) | {first_round:.2f} | "
        f"{first_round / seq_s:.2f} |",
        f"| warm round on the cluster | {warm_s:.2f} | {warm_s / seq_s:.2f} |",
        "",
        f"Speed-up of a warm round: {seq_s / warm_s:.2f}x with {opts.workers} worker processes; counting the "
        f"start-up and the first round, the cluster is ahead after "
        f"{_break_even(seq_s, start_up + first_round, warm_s)}. The cluster's value and gradients are "
        "bit-identical to the same pairwise sum computed in this process, and within "
        f"{err:.1e} (relative) of the plain loop's member-order sum. A gradient on a worker taking longer than "
        "in this process means the workers did not have a core each (other work on the machine).",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if opts.out:
        with open(os.path.join(opts.out, "dask_results.md"), "w") as fh:
            fh.write(text)


def _start(LocalCluster, Client, workers, env):
    cluster = LocalCluster(n_workers=workers, processes=True, threads_per_worker=1, dashboard_address=None, env=env)
    return cluster, Client(cluster)


def _break_even(seq_s, setup_s, warm_s):
    """How many rounds the cluster needs to be ahead of one process, start-up included."""
    if warm_s >= seq_s:
        return "no number of rounds (a warm round is not faster)"
    rounds = 1
    while setup_s + (rounds - 1) * warm_s >= rounds * seq_s:
        rounds += 1
    return f"{rounds} round{'s' if rounds > 1 else ''}"


if __name__ == "__main__":
    main()
