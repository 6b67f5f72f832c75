"""Gradient time of the Fortran corpus on the native backend against gfortran -O2's forward pass.

For each routine of ``benchmarks/fortran`` at its "bench" size, in one process: the gfortran -O2
build's forward pass (the call alone, on fresh Fortran-ordered copies of the arguments), flowgrad's
forward pass (``prog(*args)``) and flowgrad's gradient (``flowgrad.vjp`` and one pullback), each the
best of several runs after a first, compiling one. The table reports the ratios to gfortran's
forward; the cheap-gradient principle puts a reverse-mode gradient at about 3-5 forward passes.

    python -m benchmarks.fortran_bench --out benchmarks        # writes benchmarks/fortran_results.md
"""
from __future__ import annotations

import argparse
import ctypes
import os
import platform
import time

import numpy as np


def _best(fn, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def _gfortran_forward(oracle, args, repeat):
    """The best time of the gfortran routine's call alone (arguments copied before each call)."""
    from .fortran.gfortran import _CTYPES

    def prepared():
        keep, ptrs = [], []
        for d, a in zip(oracle.prog.proc.dummies, args):
            dt = oracle.kinds[d]
            if a is None:
                ptrs.append(None)
            elif np.ndim(a):
                arr = np.asfortranarray(np.array(a, dtype=dt))
                keep.append(arr)
                ptrs.append(arr.ctypes.data_as(ctypes.c_void_p))
            else:
                box = _CTYPES[dt](a)
                keep.append(box)
                ptrs.append(ctypes.byref(box))
        return keep, ptrs
    times = []
    for _ in range(repeat):
        keep, ptrs = prepared()
        t0 = time.perf_counter()
        oracle.fn(*ptrs)
        times.append(time.perf_counter() - t0)
        del keep
    return min(times)


def bench_case(case, repeat=5, backend="native"):
    import flowgrad
    from .fortran.gfortran import Gfortran
    prog = flowgrad.from_fortran(case.files, case.entry, include_dirs=case.include_dirs)
    if case.modules:
        prog = prog.with_modules(case.modules)
    oracle = Gfortran(prog, case.files, include_dirs=case.include_dirs, flags=("-O2",))
    if case.setup is not None:
        case.setup(oracle.lib)
    args = case.args(np.random.default_rng(0), "bench")
    t_gf = _gfortran_forward(oracle, args, repeat)
    t0 = time.perf_counter()
    prog(*args, backend=backend)
    compile_fwd = time.perf_counter() - t0
    t_fwd = _best(lambda: prog(*args, backend=backend), repeat)
    outs, pullback = flowgrad.vjp(prog, *args, backend=backend)
    outs = outs if len(prog.outputs) > 1 else (outs,)
    rng = np.random.default_rng(1)
    cts = tuple(rng.standard_normal(np.shape(o)) if np.asarray(o).dtype.kind == "f" else None for o in outs)
    ct = cts if len(prog.outputs) > 1 else cts[0]
    pullback(ct)

    def grad():
        _, pb = flowgrad.vjp(prog, *args, backend=backend)
        pb(ct)
    t_grad = _best(grad, repeat)
    sizes = ", ".join(f"{n}={v}" for n, v in zip(prog.dummies, args) if isinstance(v, int) and not isinstance(v, bool))
    return {"name": case.name, "sizes": sizes, "gfortran": t_gf, "forward": t_fwd, "grad": t_grad,
            "compile": compile_fwd}


def main(argv=None):
    from .fortran import CASES
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=None, help="directory for fortran_results.md")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("names", nargs="*", help="corpus routines (default: all)")
    a = p.parse_args(argv)
    rows = []
    for case in CASES:
        if a.names and case.name not in a.names:
            continue
        r = bench_case(case, a.repeat)
        rows.append(r)
        print(f"{r['name']:15s} gfortran {r['gfortran'] * 1e3:9.3f} ms   forward x{r['forward'] / r['gfortran']:6.2f}"
              f"   gradient x{r['grad'] / r['gfortran']:6.2f}", flush=True)
    lines = ["# Fortran corpus: flowgrad's gradient against gfortran's forward pass", "",
             "`python -m benchmarks.fortran_bench --out benchmarks`, on "
             f"{platform.processor() or platform.machine()} ({os.cpu_count()} CPUs), one thread. gfortran -O2 "
             "forward: the routine's call alone; flowgrad (native backend): `prog(*args)` and `flowgrad.vjp` "
             "with one pullback, arguments and results included; best of "
             f"{a.repeat} runs after a first that compiles. The machine may be shared: compare ratios, and expect "
             "them to move by tens of percent between runs.", "",
             "| routine | sizes | gfortran -O2 forward (ms) | flowgrad forward (ms) | flowgrad gradient (ms) "
             "| forward / gfortran | gradient / gfortran |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['name']} | {r['sizes']} | {r['gfortran'] * 1e3:.3f} | {r['forward'] * 1e3:.3f} | "
                     f"{r['grad'] * 1e3:.3f} | {r['forward'] / r['gfortran']:.2f} | {r['grad'] / r['gfortran']:.2f} |")
    ratios = [r["grad"] / r["gfortran"] for r in rows]
    if ratios:
        lines += ["", f"Geometric mean of gradient / gfortran forward: {float(np.exp(np.mean(np.log(ratios)))):.2f}."]
    text = "\n".join(lines) + "\n"
    if a.out:
        with open(os.path.join(a.out, "fortran_results.md"), "w") as f:
            f.write(text)
    print(text)


if __name__ == "__main__":
    main()
