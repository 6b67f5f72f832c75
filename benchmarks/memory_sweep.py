"""Memory-budget sweep: measured peak memory and time of one gradient call as the budget falls.

    python -m benchmarks.memory_sweep [--kernel burgers_1d] [--points 9] [--out benchmarks]

For each budget, from the store-all peak down to the smallest feasible one, the planner picks
loop schedules; the gradient is run with the reference (numpy) backend under ``tracemalloc``
(NumPy's allocations are traced), and the table records the predicted and measured peaks, the
time, the schedule and whether the gradient equals the store-all one bit for bit. Writes
``memory_sweep.md`` and ``memory_sweep.png`` into ``--out``.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import tracemalloc

import numpy as np

import flowgrad
from benchmarks import kernels
from flowgrad.checkpoint.plan import fmt_bytes
from flowgrad.checkpoint.schedules import KIND_NAMES


def measure(fn, args, wrt, budget, repeat):
    g = flowgrad.value_and_grad(fn, wrt=wrt, backend="numpy", memory_budget=budget)
    g(*args)                                    # capture, plan and compile outside the measurement
    times, peak = [], 0
    for _ in range(repeat):
        tracemalloc.start()
        tracemalloc.reset_peak()
        t0 = time.perf_counter()
        _, grads = g(*args)
        times.append(time.perf_counter() - t0)
        peak = max(peak, tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    entry, _, plan = g.planned(args)
    return grads, peak, statistics.median(times), plan


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernel", default="burgers_1d")
    ap.add_argument("--size", default="bench")
    ap.add_argument("--points", type=int, default=9)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=None)
    opts = ap.parse_args(argv)
    mod = kernels.load(opts.kernel)
    args = mod.args(opts.size)
    store = flowgrad.explain(mod.kernel, *args, wrt=mod.WRT, backend="numpy")
    lo, hi = store.min_peak, store.store_all_peak
    budgets = [None] + [int(b) for b in np.geomspace(hi, lo * 1.0001, opts.points)]
    ref, rows = None, []
    for budget in budgets:
        grads, peak, secs, plan = measure(mod.kernel, args, mod.WRT, budget, opts.repeat)
        ref = grads if ref is None else ref
        same = all(np.array_equal(a, b) for a, b in zip(ref, grads))
        sched = "; ".join(f"{KIND_NAMES[k]}" + (f"({p})" if k else "") for _, k, p, _, _ in plan.loops) \
            if plan else "store_all"
        rows.append((budget, plan.peak if plan else store.peak, peak, secs, sched, same))
        print(f"budget {fmt_bytes(budget) if budget else 'none':>10}  predicted {fmt_bytes(rows[-1][1]):>10}  "
              f"measured {fmt_bytes(peak):>10}  {secs:7.3f} s  {sched:24s} identical={same}", flush=True)
    base_time = rows[0][3]
    lines = [f"# Memory budget sweep: `{opts.kernel}` ({opts.size} size, numpy backend)", "",
             f"Arguments: {', '.join(str(getattr(a, 'shape', a)) for a in args)}; wrt = {mod.WRT}. "
             "Measured peak = tracemalloc peak of one gradient call (NumPy allocations); time = median of "
             f"{opts.repeat}. The slack allowed above the budget is 0: every measured peak must be within it.", "",
             "| budget | predicted peak | measured peak | within budget | time (s) | time / store-all | schedule | "
             "gradient identical |", "|---|---|---|---|---|---|---|---|"]
    for budget, pred, peak, secs, sched, same in rows:
        ok = "yes" if budget is None or peak <= budget else "NO"
        lines.append(f"| {fmt_bytes(budget) if budget else 'none (store all)'} | {fmt_bytes(pred)} | "
                     f"{fmt_bytes(peak)} | {ok} | {secs:.3f} | {secs / base_time:.2f} | {sched} | {same} |")
    peaks = [r[2] for r in rows]
    monotone = all(b <= a * 1.02 for a, b in zip(peaks, peaks[1:]))
    lines += ["", f"Measured peak falls monotonically as the budget falls: {'yes' if monotone else 'NO'}. "
              f"All gradients identical to store-all: {'yes' if all(r[5] for r in rows) else 'NO'}.", ""]
    if opts.out:
        os.makedirs(opts.out, exist_ok=True)
        with open(os.path.join(opts.out, "memory_sweep.md"), "w") as f:
            f.write("\n".join(lines))
        _plot(rows, os.path.join(opts.out, "memory_sweep.png"), opts.kernel)
    print("\n".join(lines))
    return 0 if monotone and all(r[5] for r in rows) and all(b is None or p <= b for b, _, p, *_ in rows) else 1


def _plot(rows, path, name):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    mib = 2 ** 20
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    pts = [(r[2] / mib, r[3], r[0]) for r in rows]
    ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label="measured (peak, time)")
    budgets = [r[0] / mib for r in rows if r[0]]
    for b in budgets:
        ax.axvline(b, color="0.85", lw=0.8, zorder=0)
    ax.set_xscale("log")
    ax.set_xlabel("peak memory of the gradient call (MiB, log scale); grey lines: budgets")
    ax.set_ylabel("gradient time (s)")
    ax.set_title(f"{name}: memory-time trade-off chosen by the planner")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
