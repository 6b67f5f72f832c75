"""Memory-budget sweep: measured peak memory and time of one gradient call as the budget falls.

    python -m benchmarks.memory_sweep [--kernels nonlinear_diffusion_2d,vadv,adi,subcycled_reaction_diffusion]
                                      [--points 7] [--out benchmarks]

For each kernel, budgets run from the store-all peak down to the smallest one the planner
accepts (its floor). Each gradient runs with the reference (numpy) backend under
``tracemalloc`` (NumPy's array buffers are traced); the table records the predicted and the
measured peak, the time, the loop schedules and whether the gradient equals the store-all one
bit for bit. While each call runs, a thread samples the traced memory, which gives the memory
against time plot.

The floor is compared with the measured minimal working set: what any gradient of the kernel
must hold at once. That is the forward call's own peak (measured: its argument copies and
temporaries), the gradient arrays, and, for the top-level loop with the largest such need, one
snapshot of its state and one iteration's tape (their sizes); where loops nested in it are
planned on their own, its iteration's tape besides theirs, and for the nested loop needing the
most, the same again (one snapshot and one iteration). A schedule reads ``loop: kind``;
a nested loop's ``inside`` is its being part of the tape of the loop around it. Writes ``memory_sweep.md`` and
``memory_sweep_<kernel>.png`` into ``--out``.
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import tracemalloc

import numpy as np

import flowgrad
from benchmarks import kernels
from benchmarks.run import fresh, peak_memory
from flowgrad.checkpoint.plan import INSIDE, fmt_bytes
from flowgrad.checkpoint.schedules import KIND_NAMES

DEFAULT = "nonlinear_diffusion_2d,vadv,adi,subcycled_reaction_diffusion"
SLACK = 0.10            # the measured peak may exceed the budget by this fraction at most


def resident():
    """The process's resident memory in bytes (Linux ``/proc/self/statm``), else 0."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class Sampler:
    """Traced and resident memory sampled every ``every`` seconds while a call runs: (seconds,
    traced bytes, resident bytes) above what they were at the start."""

    def __init__(self, every=0.002):
        self.every, self.samples, self._stop = every, [], threading.Event()

    def __enter__(self):
        self.t0 = time.perf_counter()
        self.base = tracemalloc.get_traced_memory()[0]
        self.rss = resident()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            self.samples.append((time.perf_counter() - self.t0, tracemalloc.get_traced_memory()[0] - self.base,
                                 resident() - self.rss))
            time.sleep(self.every)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def measure(mod, args, budget):
    """(gradients, measured peak, seconds, plan, samples) of one planned gradient call."""
    g = flowgrad.grad(mod.kernel, wrt=mod.WRT, backend="numpy", memory_budget=budget)
    g(*fresh(args))                              # capture, plan and compile outside the measurement
    call_args = fresh(args)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        with Sampler() as sampler:
            t0 = time.perf_counter()
            grads = g(*call_args)
            secs = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    plan = g.planned(call_args)[2]
    grads = grads if isinstance(grads, tuple) else (grads,)
    return [np.asarray(x) for x in grads], peak, secs, plan, sampler.samples


def working_set(mod, args, store):
    """The measured minimal working set and its parts (see the module's docstring)."""
    forward = peak_memory(lambda *a: mod.kernel(*fresh(a)), lambda: args)
    names = list(mod.kernel.__code__.co_varnames[:mod.kernel.__code__.co_argcount])
    grads = sum(np.asarray(args[names.index(w)]).nbytes for w in mod.WRT)
    cands = [cand for cand, *_ in store.loops]

    def need(cand):     # its snapshot and one iteration: of each loop nested in it, one at a time
        inner = [need(c) for c in cands if c.parent is cand]
        return cand.state_bytes + (cand.own_bytes + max(inner) if inner else cand.most_bytes)
    loop = max((need(c) for c in cands if c.parent is None), default=0)
    return forward + grads + loop, {"forward peak": forward, "gradient": grads, "snapshots + one iteration": loop}


def sweep(name, points, size):
    mod = kernels.load(name)
    args = mod.args(size)
    store = flowgrad.explain(mod.kernel, *args, wrt=mod.WRT, backend="numpy")
    lo, hi = store.min_peak, store.store_all_peak
    budgets = [None] + sorted({int(b) for b in np.geomspace(hi, lo, points)}, reverse=True)
    W, parts = working_set(mod, args, store)
    rows, ref = [], None
    for budget in budgets:
        grads, peak, secs, plan, samples = measure(mod, args, budget)
        ref = grads if ref is None else ref
        same = all(np.array_equal(a, b) for a, b in zip(ref, grads))
        sched = "; ".join(f"{c.key}: " + ("inside" if p == INSIDE else KIND_NAMES[k] + (f"({p})" if k else ""))
                          for c, k, p, _, _ in plan.loops) if plan else "store_all"
        rss = max((x[2] for x in samples), default=0)
        rows.append(dict(budget=budget, predicted=plan.peak if plan else store.peak, peak=peak, secs=secs,
                         sched=sched, same=same, samples=samples, rss=rss))
        print(f"{name}: budget {fmt_bytes(budget) if budget else 'none':>10}  predicted "
              f"{fmt_bytes(rows[-1]['predicted']):>10}  measured {fmt_bytes(peak):>10}  {secs:8.3f} s  "
              f"{sched:28s} identical={same}", flush=True)
    return mod, args, store, W, parts, rows


def report(name, mod, args, store, W, parts, rows):
    base_time = rows[0]["secs"]
    floor = store.min_peak
    lines = [f"## `{name}`", "",
             f"Arguments: {', '.join(str(getattr(a, 'shape', a)) for a in args)}; wrt = {mod.WRT}.", "",
             f"Measured minimal working set: **{fmt_bytes(W)}** = " +
             " + ".join(f"{k} {fmt_bytes(v)}" for k, v in parts.items()) + ". " +
             f"Smallest budget accepted (floor): **{fmt_bytes(floor)}**, **{floor / W:.2f}x** the working set "
             f"(target 1.5x).", "",
             "| budget | predicted peak | measured peak | measured / budget | resident growth (sampled) | "
             "time (s) | time / store-all | schedule | gradient identical |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio = "" if r["budget"] is None else f"{r['peak'] / r['budget']:.3f}"
        lines.append(f"| {fmt_bytes(r['budget']) if r['budget'] else 'none (store all)'} | "
                     f"{fmt_bytes(r['predicted'])} | {fmt_bytes(r['peak'])} | {ratio} | {fmt_bytes(r['rss'])} | "
                     f"{r['secs']:.3f} | "
                     f"{r['secs'] / base_time:.2f} | {r['sched']} | {r['same']} |")
    peaks = [r["peak"] for r in rows]
    # the same plan measures the same up to the interpreter's own small allocations
    monotone = all(b <= a * 1.01 + 16 * 1024 for a, b in zip(peaks, peaks[1:]))
    within = all(r["budget"] is None or r["peak"] <= (1 + SLACK) * r["budget"] for r in rows)
    worst = max((r["peak"] / r["budget"] for r in rows if r["budget"]), default=0.0)
    same = all(r["same"] for r in rows)
    rss = max((r["rss"] / r["budget"] for r in rows if r["budget"]), default=0.0)
    lines += ["", f"Within {SLACK:.0%} of the budget at every budget: {'yes' if within else 'NO'} "
              f"(largest measured / budget: {worst:.3f}; resident growth / budget: at most {rss:.3f}). "
              "Measured peak falls monotonically (to 1%): "
              f"{'yes' if monotone else 'NO'}. All gradients identical to store-all: {'yes' if same else 'NO'}.", ""]
    ok = monotone and within and same and floor <= 1.5 * W
    return lines, ok


def plot(name, rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    mib = 2 ** 20
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for r in rows:
        if not r["samples"]:
            continue
        t, m, _ = zip(*r["samples"])
        label = fmt_bytes(r["budget"]) if r["budget"] else "store all"
        line, = ax.plot(t, np.array(m) / mib, lw=1, label=label)
        if r["budget"]:
            ax.axhline(r["budget"] / mib, color=line.get_color(), ls=":", lw=0.8)
    ax.set_xscale("symlog", linthresh=0.1)
    ax.set_xlim(left=0)
    ax.set_yscale("log")
    ax.set_ylim(bottom=0.5 * min(r["peak"] for r in rows) / mib)
    ax.set_xlabel("seconds into the gradient call")
    ax.set_ylabel("traced memory (MiB); dotted: budgets")
    ax.set_title(f"{name}: memory against time")
    ax.legend(fontsize=7, title="budget")
    ax2.plot([r["peak"] / mib for r in rows], [r["secs"] for r in rows], "o-")
    ax2.set_xscale("log")
    ax2.set_xlabel("measured peak (MiB)")
    ax2.set_ylabel("gradient time (s)")
    ax2.set_title("the trade-off the planner chose")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels", default=DEFAULT)
    ap.add_argument("--size", default="bench")
    ap.add_argument("--points", type=int, default=7)
    ap.add_argument("--out", default=None)
    opts = ap.parse_args(argv)
    lines = ["# Memory budget sweeps (numpy backend)", "",
             "Measured peak: `tracemalloc` peak of one gradient call above what was live before it (NumPy's "
             "array buffers and Python's objects). Resident growth: the process's resident memory "
             "(`/proc/self/statm`) sampled every 2 ms during the call, its largest rise above the start "
             "(samples can miss a short peak; large arrays are mapped and unmapped, so it follows them). "
             "Budgets run from the store-all peak down to the floor, the smallest the planner accepts. "
             f"Target: measured within {SLACK:.0%} of the budget at every "
             "budget, the floor within 1.5x of the measured minimal working set, peak falling monotonically, "
             "gradients bit-identical (uncompute off).", ""]
    all_ok = True
    for name in opts.kernels.split(","):
        mod, args, store, W, parts, rows = sweep(name, opts.points, opts.size)
        part, ok = report(name, mod, args, store, W, parts, rows)
        all_ok &= ok
        lines += part + [f"![{name}](memory_sweep_{name}.png)", ""]
        if opts.out:
            os.makedirs(opts.out, exist_ok=True)
            plot(name, rows, os.path.join(opts.out, f"memory_sweep_{name}.png"))
    text = "\n".join(lines)
    if opts.out:
        with open(os.path.join(opts.out, "memory_sweep.md"), "w") as f:
            f.write(text)
    print(text)
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
