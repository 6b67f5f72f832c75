"""Forward mode and second order on the kernel corpus, side by side with JAX.

For each kernel of ``benchmarks/kernels`` (one process, one machine), on each flowgrad backend:
the forward (``flowgrad.jit``), ``flowgrad.jvp`` in one random direction of the differentiated
arguments, the gradient (``flowgrad.grad``) and ``flowgrad.hvp`` (forward over reverse) in the
first differentiated argument; and JAX's same four on the kernel's twin, each under ``jax.jit``:
``f``, ``jax.jvp(f)``, ``jax.grad(f)`` and ``jax.jvp(jax.grad(f))``. Each is called once to
capture and compile, then timed: medians of ``Timer`` (``benchmarks.run``). The table reports the costs
the issue sets goals for: jvp / forward (goal <= 2) and hvp / gradient (goal <= 3), and JAX's.

Then a dense Hessian of a 100-input function through a 1,000-step loop: ``flowgrad.hessian``
(every direction in one program) against ``jax.jit(jax.hessian(f))`` of its ``lax.fori_loop``
twin, with the agreement of the two.

    python -m benchmarks.forward_bench --out benchmarks        # writes benchmarks/forward_results.md
    python -m benchmarks.forward_bench --kernels heat_1d_explicit,lu --size test
"""
from __future__ import annotations

import argparse
import copy
import os
import platform
import sys
import time

import numpy as np

from . import kernels
from .run import Timer, flowgrad_backends, fresh, import_jax, wrt_positions


def _geomean(xs):
    xs = [x for x in xs if x is not None and x > 0]
    return float(np.exp(np.mean(np.log(xs)))) if xs else None


def _directions(args, positions, seed=0):
    rng = np.random.default_rng(seed)
    out = [None] * len(args)
    for p in positions:
        a = args[p]
        out[p] = rng.standard_normal(np.shape(a)) if isinstance(a, np.ndarray) else float(rng.standard_normal())
    return out


def bench_flowgrad(mod, args, backend, timer):
    """Median seconds of forward, jvp, gradient and hvp on ``backend``."""
    import flowgrad
    positions = wrt_positions(mod)
    tangents = _directions(args, positions)
    wrt = tuple(mod.WRT)
    fwd = flowgrad.jit(mod.kernel, backend=backend)
    grad = flowgrad.grad(mod.kernel, wrt=wrt, backend=backend)
    calls = {"fwd": fwd,
             "jvp": lambda *a: flowgrad.jvp(mod.kernel, a, tangents, wrt=wrt, backend=backend),
             "grad": grad,
             "hvp": lambda *a: flowgrad.hvp(mod.kernel, a, tangents, wrt=wrt[0], backend=backend)}
    out = {}
    for name, call in calls.items():
        call(*fresh(args))                  # capture and compile, outside the timing
        out[name] = timer.run(call, lambda: fresh(args))[0]["median_s"]
    return out


def bench_jax(jax, mod, args, timer):
    """Median seconds of JAX's forward, jvp, gradient and jvp-of-gradient (all jitted)."""
    static = tuple(i for i, a in enumerate(args)
                   if isinstance(a, (bool, int, np.integer, np.bool_)) and not isinstance(a, np.ndarray))
    positions = wrt_positions(mod)
    jargs = tuple(jax.device_put(a) if isinstance(a, np.ndarray) else a for a in args)
    tangents = _directions(args, positions)

    def split(full):
        """``f(wrt values)`` with the other arguments fixed (the static ones stay Python values)."""
        def f(*w):
            a = list(full)
            for p, v in zip(positions, w):
                a[p] = v
            return mod.jax_kernel(*a)
        return f

    def sync(x):
        return jax.block_until_ready(x)

    fwd = jax.jit(mod.jax_kernel, static_argnums=static)
    tans = tuple(np.asarray(tangents[p], dtype=np.float64) for p in positions)
    statics = {i: args[i] for i in static}
    traced = [i for i in range(len(args)) if i not in static]

    def with_static(fn):
        """``fn(full args)`` jitted over the non-static arguments."""
        def inner(*dyn):
            full = [None] * len(args)
            for i, v in zip(traced, dyn):
                full[i] = v
            for i, v in statics.items():
                full[i] = v
            return fn(full)
        return jax.jit(inner)
    dyn = tuple(jargs[i] for i in traced)
    jvp = with_static(lambda full: jax.jvp(split(full), tuple(full[p] for p in positions), tans))
    grad = with_static(lambda full: jax.grad(split(full), argnums=tuple(range(len(positions))))(
        *(full[p] for p in positions)))

    def hvp_of(full):
        g0 = jax.grad(lambda w0: split(full)(w0, *(full[p] for p in positions[1:])))
        return jax.jvp(g0, (full[positions[0]],), (tans[0],))
    hvp = with_static(hvp_of)
    out = {}
    sync(fwd(*jargs))                       # compile, outside the timing
    out["fwd"] = timer.run(lambda *a: fwd(*a), lambda: jargs, sync)[0]["median_s"]
    for name, fn in (("jvp", jvp), ("grad", grad), ("hvp", hvp)):
        sync(fn(*dyn))
        out[name] = timer.run(lambda *a, fn=fn: fn(*a), lambda: dyn, sync)[0]["median_s"]
    return out


# ---------------------------------------------------------------------------------------------
# The Hessian through a long loop
# ---------------------------------------------------------------------------------------------


def relax(p, steps):
    """100 coupled states relaxed for ``steps`` explicit steps; ``p`` sets each one's coupling."""
    x = np.linspace(0.0, 1.0, p.shape[0])
    for t in range(steps):
        x = x + 0.001 * np.tanh(p * x + np.roll(x, 1))
    return np.sum(x * x)


def relax_jax(p, steps):
    import jax
    import jax.numpy as jnp
    x = jnp.linspace(0.0, 1.0, p.shape[0])
    x = jax.lax.fori_loop(0, steps, lambda t, x: x + 0.001 * jnp.tanh(p * x + jnp.roll(x, 1)), x)
    return jnp.sum(x * x)


def bench_hessian(jax, backends, n=100, steps=1000, repeat=3):
    import flowgrad
    p = np.random.default_rng(0).uniform(0.5, 1.5, n)
    rows = []
    for backend in backends:
        h = flowgrad.hessian(relax, backend=backend)
        t0 = time.perf_counter()
        H = h(p, steps)
        first = time.perf_counter() - t0
        best = min(_timed(lambda: h(p, steps)) for _ in range(repeat))
        rows.append({"system": f"flowgrad[{backend}] hessian", "first_s": first, "run_s": best, "H": H})
    if jax is not None:
        jh = jax.jit(jax.hessian(relax_jax), static_argnums=1)
        t0 = time.perf_counter()
        HJ = np.asarray(jax.block_until_ready(jh(p, steps)))
        first = time.perf_counter() - t0
        best = min(_timed(lambda: jax.block_until_ready(jh(p, steps))) for _ in range(repeat))
        rows.append({"system": "jax.jit(jax.hessian)", "first_s": first, "run_s": best, "H": HJ})
    ref = rows[-1]["H"]
    for r in rows:
        r["err"] = float(np.max(np.abs(r["H"] - ref)) / np.max(np.abs(ref)))
    return rows


def _timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


# ---------------------------------------------------------------------------------------------


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="bench", choices=("bench", "test"))
    ap.add_argument("--kernels", default=None, help="comma-separated kernel names (default: all)")
    ap.add_argument("--backends", default=None, help="comma-separated flowgrad backends (default: all available)")
    ap.add_argument("--budget", type=float, default=1.0, help="seconds of timed calls per measurement")
    ap.add_argument("--no-jax", action="store_true")
    ap.add_argument("--out", default=None, help="directory for forward_results.md")
    a = ap.parse_args(argv)
    names = a.kernels.split(",") if a.kernels else list(kernels.NAMES)
    backends = a.backends.split(",") if a.backends else flowgrad_backends()[0]
    jax = None if a.no_jax else import_jax()
    timer = Timer(a.budget)
    start = time.time()
    rows = []
    for name in names:
        mod = kernels.load(name)
        args = mod.args(a.size)
        row = {"name": name, "jax_note": getattr(mod, "JAX_NOTE", None)}
        for backend in backends:
            try:
                row[backend] = bench_flowgrad(mod, copy.deepcopy(args), backend, timer)
            except Exception as exc:                  # reported in the table, not fatal
                row[backend] = {"error": f"{type(exc).__name__}: {str(exc)[:120]}"}
        if jax is not None and hasattr(mod, "jax_kernel"):
            try:
                row["jax"] = bench_jax(jax, mod, copy.deepcopy(args), timer)
            except Exception as exc:
                row["jax"] = {"error": f"{type(exc).__name__}: {str(exc)[:120]}"}
        rows.append(row)
        print(_line(row, backends), flush=True)
    hess = bench_hessian(jax, backends)
    command = "python -m benchmarks.forward_bench " + " ".join(argv if argv is not None else sys.argv[1:])
    text = report(rows, backends, hess, a, time.time() - start, command)
    if a.out:
        with open(os.path.join(a.out, "forward_results.md"), "w") as f:
            f.write(text)
    print(text)


def _ratio(m, num, den):
    if not m or "error" in m:
        return None
    return m[num] / m[den]


def _fmt(x):
    return "" if x is None else f"{x:.2f}"


def _line(row, backends):
    parts = [f"{row['name']:22s}"]
    for s in list(backends) + ["jax"]:
        m = row.get(s)
        if m and "error" in m:
            parts.append(f"{s}: {m['error'][:60]}")
        elif m:
            parts.append(f"{s}: jvp/fwd {_fmt(_ratio(m, 'jvp', 'fwd'))} hvp/grad {_fmt(_ratio(m, 'hvp', 'grad'))}")
    return "  ".join(parts)


def report(rows, backends, hess, a, seconds, command):
    systems = list(backends) + ["jax"]
    lines = ["# Forward mode and Hessian-vector products against JAX", "",
             f"`{command.strip()}` ({len(rows)} kernels, size `{a.size}`, about {a.budget:g} s of "
             f"timed calls per measurement), on {platform.processor() or platform.machine()} ({os.cpu_count()} "
             f"CPUs), {time.strftime('%Y-%m-%d')}, {seconds:.0f} s in all. Medians after a warm-up call that "
             "compiles (itself after a first call, not timed); arguments copied outside the timed region. JAX: `jax.jit` of `f`, `jax.jvp(f)`, "
             "`jax.grad(f)` and `jax.jvp(jax.grad(f))` on the kernel's twin, float64. The machine is shared: "
             "compare ratios, and expect them to move by tens of percent between runs.", "",
             "Goals: jvp / forward <= 2 and hvp / gradient <= 3 (median over the kernels).", "",
             "## Summary", "",
             "| system | jvp / fwd, median | jvp / fwd, geomean | hvp / grad, median | hvp / grad, geomean | kernels |",
             "|---|---:|---:|---:|---:|---:|"]
    for s in systems:
        jr = [_ratio(r.get(s), "jvp", "fwd") for r in rows]
        hr = [_ratio(r.get(s), "hvp", "grad") for r in rows]
        jr, hr = [x for x in jr if x], [x for x in hr if x]
        if not jr:
            continue
        name = "JAX" if s == "jax" else f"flowgrad[{s}]"
        lines.append(f"| {name} | {np.median(jr):.2f} | {_geomean(jr):.2f} | {np.median(hr):.2f} | "
                     f"{_geomean(hr):.2f} | {len(jr)} |")
    if "native" in backends:
        vs = [r["jax"]["hvp"] / r["native"]["hvp"] for r in rows
              if r.get("jax") and "error" not in r["jax"] and r.get("native") and "error" not in r["native"]]
        if vs:
            lines += ["", f"JAX's hvp time / flowgrad[native]'s, geometric mean over {len(vs)} kernels: "
                          f"{_geomean(vs):.2f} (> 1: flowgrad is faster)."]
    lines += ["", "## Per kernel", "",
              "| kernel | " + " | ".join(f"{s} jvp/fwd | {s} hvp/grad" for s in systems) +
              " | flowgrad[native] hvp (ms) | JAX hvp (ms) |",
              "|---|" + "---:|---:|" * len(systems) + "---:|---:|"]
    for r in rows:
        cells = []
        for s in systems:
            m = r.get(s)
            if m is None:
                cells += ["—", "—"]
            elif "error" in m:
                cells += ["error", "error"]
            else:
                cells += [_fmt(_ratio(m, "jvp", "fwd")), _fmt(_ratio(m, "hvp", "grad"))]
        nat, jx = r.get("native"), r.get("jax")
        cells.append(f"{nat['hvp'] * 1e3:.3f}" if nat and "error" not in nat else "")
        cells.append(f"{jx['hvp'] * 1e3:.3f}" if jx and "error" not in jx else "")
        lines.append(f"| `{r['name']}` | " + " | ".join(cells) + " |")
    errors = [(r["name"], s, r[s]["error"]) for r in rows for s in systems if r.get(s) and "error" in r[s]]
    if errors:
        lines += ["", "Errors:", ""] + [f"- `{n}` on {s}: {e}" for n, s, e in errors]
    no_jax = [r for r in rows if r.get("jax") is None]
    lines += ["", "## Kernels JAX cannot differentiate as written", "",
              "flowgrad's jvp and hvp run on these (and are checked against differences of the values and "
              "gradients in `tests/test_forward_mode.py`); JAX needs them rewritten:", ""]
    lines += [f"- `{r['name']}`: {r['jax_note'] or 'no JAX twin'}" for r in no_jax]
    lines += ["", "## Dense Hessian: 100 inputs through a 1,000-step loop", "",
              "`benchmarks.forward_bench.relax`: `x = x + 0.001 * tanh(p * x + roll(x, 1))` for 1,000 steps, "
              "the Hessian of `sum(x * x)` in `p` (100 × 100). flowgrad: `flowgrad.hessian` (forward over "
              "reverse, every direction in one program); JAX: `jax.jit(jax.hessian(f))` of the `lax.fori_loop` "
              "twin. Best of 3 after the first call.", "",
              "| system | first call (s) | run (s) | max difference from JAX (relative) |", "|---|---:|---:|---:|"]
    for h in hess:
        lines.append(f"| {h['system']} | {h['first_s']:.2f} | {h['run_s']:.4f} | {h['err']:.1e} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
