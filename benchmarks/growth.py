"""How gradient times grow with the work: every corpus kernel at ``bench`` and ``bench4`` size.

Usage (from the repository root)::

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 XLA_FLAGS=--xla_cpu_multi_thread_eigen=false \\
        python -m benchmarks.growth --one-cpu --out benchmarks      # benchmarks/growth.md
    python -m benchmarks.growth --kernels gemm,jacobi_2d --budget 1   # a quick look
    python -m benchmarks.growth --from benchmarks/results/growth.json --out benchmarks   # re-render

``bench4`` is four times ``bench``'s arithmetic (each kernel's ``SIZES`` says how it was chosen).
For every kernel with a JAX twin, the measurements of ``benchmarks.run`` (``bench_kernel``: the
NumPy forward, flowgrad's forward and gradient on one backend, ``jit(grad)`` of the JAX twin and
PyTorch autograd of the torch twin) run at both sizes, one size right after the other, so that
both see the same machine. The report gives each system's growth factor (bench4 time / bench
time: 4 for a time proportional to the work, less where fixed costs such as per-call or
per-loop-iteration overhead weigh, more where the larger problem falls out of a cache) and
JAX / flowgrad at both sizes.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from . import kernels, report, run

SIZES = ("bench", "bench4")
SCALE = 4.0                     # bench4's work / bench's work


# ---------------------------------------------------------------------------------------------
# Measuring
# ---------------------------------------------------------------------------------------------


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.growth",
        description="Gradient times at bench and bench4 size (4x the work): flowgrad, JAX, PyTorch, NumPy.")
    p.add_argument("--kernels", default=None, help="comma-separated kernel names (default: all with a JAX twin)")
    p.add_argument("--backend", default="native", help="the flowgrad backend (default: native)")
    p.add_argument("--budget", type=float, default=2.0,
                   help="seconds of timed repetitions per kernel and size, shared by its measurements (default 2)")
    p.add_argument("--repeat", type=int, default=None,
                   help="timed repetitions per measurement (default: adaptive, within --budget)")
    p.add_argument("--one-cpu", action="store_true",
                   help="pin the process to one CPU, as benchmarks.run --one-cpu does")
    p.add_argument("--no-torch", action="store_true", help="skip PyTorch even when it is installed")
    p.add_argument("--out", default=None,
                   help="write DIR/growth.md and DIR/results/growth.json (default: both in benchmarks/results/, "
                        "which git ignores)")
    p.add_argument("--from", dest="from_json", default=None,
                   help="re-render the report from a saved growth.json instead of measuring")
    ns = p.parse_args(argv)
    if ns.repeat is not None and ns.repeat < 1:
        p.error("--repeat must be at least 1")
    return ns


def pin_to_one_cpu():
    """What ``benchmarks.run --one-cpu`` does: one CPU for the process, one Numba thread."""
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    try:
        import numba
        numba.set_num_threads(1)
    except ImportError:
        pass


def _select(spec):
    names = run._select_kernels(spec)
    return [n for n in names if hasattr(kernels.load(n), "jax_kernel")]


def measure(ns, argv):
    """Run ``benchmarks.run.bench_kernel`` at both sizes for every kernel; the results dict."""
    names = _select(ns.kernels)
    available, unavailable = run.flowgrad_backends()
    if ns.backend not in available:
        raise run.UsageError(f"flowgrad backend {ns.backend!r} is not available here: "
                             f"{unavailable.get(ns.backend, 'not in flowgrad.api.BACKENDS')}")
    jax = run.import_jax()
    if jax is None:
        raise run.UsageError("JAX is not installed: growth.py compares flowgrad with JAX")
    torch, torch_kernels = (None, {}) if ns.no_torch else run.import_torch()
    contexts = {size: run.Context(size, ns.budget, ns.repeat, False, [ns.backend], jax, torch, torch_kernels)
                for size in SIZES}
    results = {
        "command": ("python -m benchmarks.growth " + " ".join(argv)).strip(),
        "sizes": list(SIZES), "backend": ns.backend, "budget_s_per_kernel": ns.budget, "repeat": ns.repeat,
        "jax": True, "torch": torch is not None, "machine": run.machine_info(torch),
        "bench_grad_tol": run.BENCH_GRAD_TOL,
        "compile_cache": "as configured (FLOWGRAD_CACHE_DIR=%s)" % os.environ.get("FLOWGRAD_CACHE_DIR",
                                                                               "unset, the default"),
        "kernel_names": names, "runs": {size: {} for size in SIZES},
    }
    json_path = (Path(ns.out) / "results" if ns.out else run.SCRATCH) / "growth.json"
    results["json_path"] = run._display_path(json_path)
    print(f"{len(names)} kernels at {' and '.join(SIZES)} size, flowgrad[{ns.backend}], "
          f"jax {results['machine']['versions'].get('jax')}, "
          + (f"torch {results['machine']['versions'].get('torch')}" if torch is not None else "no torch"))
    started = time.perf_counter()
    for i, name in enumerate(names, 1):
        for size in SIZES:
            entry = run.bench_kernel(name, contexts[size])
            results["runs"][size][name] = entry
            print(f"[{i:2d}/{len(names)}] {size:6s} " + report.progress_line(name, entry, [ns.backend]), flush=True)
        run._write_json(json_path, results)
    results["total_wall_s"] = time.perf_counter() - started
    results["machine"]["loadavg_1min_end"] = run._loadavg()
    run._write_json(json_path, results)
    return results, json_path


# ---------------------------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------------------------


def _as_run_results(results, size):
    """One size's measurements in ``benchmarks.run``'s results layout (what ``report`` reads)."""
    out = {k: v for k, v in results.items() if k != "runs"}
    out.update(size=size, backends=[results["backend"]], kernels=results["runs"][size])
    return out


def _time(entry, system, backend):
    if entry is None:
        return None
    if system == "numpy":
        timing = entry["numpy"].get("fwd")
    elif system == "flowgrad":
        timing = entry["flowgrad"].get(backend, {}).get("grad")
    else:
        timing = (entry.get(system) or {}).get("grad")
    return timing


def rows(results):
    """Per kernel: ``{system: (bench s, bench4 s, growth)}`` and the JAX and torch ratios at both sizes."""
    backend = results["backend"]
    out = {}
    for name in results["kernel_names"]:
        entries = [results["runs"][s].get(name) for s in SIZES]
        row = {"single": {}}
        for system in ("numpy", "flowgrad", "jax", "torch"):
            timings = [_time(e, system, backend) for e in entries]
            t = [report.median(x) for x in timings]
            row[system] = (t[0], t[1], t[1] / t[0] if t[0] and t[1] else None)
            row["single"][system] = [bool(x and x.get("from_warmup")) for x in timings]
        for system in ("jax", "torch"):
            row[system + "_over_flowgrad"] = tuple(
                a / b if a and b else None for a, b in zip(row[system][:2], row["flowgrad"][:2]))
        row["flowgrad_over_jax_growth"] = (row["flowgrad"][2] / row["jax"][2]
                                           if row["flowgrad"][2] and row["jax"][2] else None)
        out[name] = row
    return out


def _ms(row, system, i):
    cell = report.fmt_ms(row[system][i])
    return cell + report.SINGLE if row["single"][system][i] and row[system][i] is not None else cell


def _growth_cell(g):
    return "–" if g is None else f"{g:.2f}"


def markdown(results):
    table = rows(results)
    backend = results["backend"]
    flat = _as_run_results(results, "bench")
    # The header's load average covers both sizes: every entry's "after" reading.
    flat["kernels"] = {f"{n} ({s})": e for s in SIZES for n, e in results["runs"][s].items()}
    flat["size"] = " and ".join(SIZES)
    lines = [
        "# How gradient times grow with the work: bench and bench4 sizes",
        "",
        f"Generated by `{report._command_with_env(flat)}`: {len(table)} kernels of `benchmarks/kernels/` "
        f"(those with a JAX twin), each at `bench` size and right after at `bench4` size, four times the "
        f"arithmetic (each kernel's `SIZES` says how the 4x was chosen). All systems in one process on one "
        f"machine. Raw numbers: `{results['json_path']}`. How to read this: `benchmarks/README.md`.",
        "",
    ]
    lines += report._machine_lines(flat)
    lines += [
        "",
        "**Growth** is a system's bench4 time / its bench time: 4.00 when the time is proportional to the "
        "work; below 4 where fixed costs (per call, per loop iteration, per small array operation) weigh; "
        "above 4 where the larger problem no longer fits a cache, or a solver does more than 4x the work. "
        f"Timed: the NumPy forward, flowgrad[{backend}] `grad` (value and gradient), `jax.jit(jax.grad)` "
        "and PyTorch autograd (forward and backward). **JAX / flowgrad** > 1: flowgrad is faster.",
        "",
        "## Summary: geometric means over the kernels",
        "",
        "| | NumPy fwd | flowgrad grad | JAX grad | torch grad |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    gm = {s: report.geomean([r[s][2] for r in table.values()]) for s in ("numpy", "flowgrad", "jax", "torch")}
    lines.append("| growth (bench4 / bench) | " + " | ".join(
        f"{_growth_cell(gm[s][0])} (n={gm[s][1]})" for s in ("numpy", "flowgrad", "jax", "torch")) + " |")
    lines += ["", "| ratio | bench | bench4 |", "| --- | ---: | ---: |"]
    for system, label in (("jax", "JAX / flowgrad"), ("torch", "torch / flowgrad")):
        cells = []
        for i in range(2):
            # the same kernels at both sizes: those measured at both
            both = [r[system + "_over_flowgrad"] for r in table.values() if None not in r[system + "_over_flowgrad"]]
            mean, count = report.geomean([b[i] for b in both])
            cells.append(f"{report.fmt_ratio(mean)} (n={count})")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", "The torch means cover only the kernels with a torch twin.", ""]

    faster = sorted(((r["flowgrad_over_jax_growth"], n) for n, r in table.items()
                     if r["flowgrad_over_jax_growth"] and r["flowgrad_over_jax_growth"] > 1.0), reverse=True)
    lines += ["## Where flowgrad's gradient grows faster than JAX's", ""]
    if faster:
        lines += [f"{len(faster)} of {len(table)} kernels; the factor is flowgrad's growth / JAX's growth (equally, "
                  "JAX / flowgrad at bench over the same at bench4), largest first. Each growth is two medians "
                  "taken seconds apart on a shared machine, so factors close to 1 can be noise (see the load "
                  "average above).", ""]
        lines += ["| kernel | flowgrad growth | JAX growth | factor | JAX / flowgrad bench | JAX / flowgrad bench4 |",
                  "| --- | ---: | ---: | ---: | ---: | ---: |"]
        for f, n in faster:
            r = table[n]
            lines.append(f"| `{n}` | {_growth_cell(r['flowgrad'][2])} | {_growth_cell(r['jax'][2])} | {f:.2f} | "
                         f"{report.fmt_ratio(r['jax_over_flowgrad'][0])} | {report.fmt_ratio(r['jax_over_flowgrad'][1])} |")
    else:
        lines.append("None: on every kernel flowgrad's gradient time grows no faster than JAX's.")
    lines += [""]

    lines += [f"## Per kernel: NumPy, flowgrad[{backend}] and JAX", "",
              "Times in ms.", "",
              "| kernel | NumPy fwd bench | bench4 | growth | flowgrad grad bench | bench4 | growth | "
              "JAX grad bench | bench4 | growth | JAX / flowgrad bench | bench4 |",
              "| --- | " + " | ".join(["---:"] * 11) + " |"]
    for n, r in table.items():
        cells = []
        for s in ("numpy", "flowgrad", "jax"):
            cells += [_ms(r, s, 0), _ms(r, s, 1), _growth_cell(r[s][2])]
        cells += [report.fmt_ratio(x) for x in r["jax_over_flowgrad"]]
        lines.append(f"| `{n}` | " + " | ".join(cells) + " |")
    mean_cells = ["**geometric mean**"]
    for s in ("numpy", "flowgrad", "jax"):
        mean_cells += ["", "", f"**{_growth_cell(gm[s][0])}**"]
    mean_cells += [f"**{report.fmt_ratio(report.geomean([r['jax_over_flowgrad'][i] for r in table.values()])[0])}**"
                   for i in range(2)]
    lines.append(report._md_row(mean_cells))
    lines += [""]
    if any(any(flags) for r in table.values() for flags in r["single"].values()):
        lines += [f"{report.SINGLE} one call only: its warm-up alone took over 3 × its share of the budget.", ""]

    torch_rows = {n: r for n, r in table.items() if r["torch"][0] or r["torch"][1]}
    if torch_rows:
        lines += ["## Per kernel: PyTorch", "", "Times in ms; the kernels with a torch twin.", "",
                  "| kernel | torch grad bench | bench4 | growth | flowgrad growth | torch / flowgrad bench | bench4 |",
                  "| --- | " + " | ".join(["---:"] * 6) + " |"]
        for n, r in torch_rows.items():
            lines.append(f"| `{n}` | {_ms(r, 'torch', 0)} | {_ms(r, 'torch', 1)} | {_growth_cell(r['torch'][2])} | "
                         f"{_growth_cell(r['flowgrad'][2])} | " +
                         " | ".join(report.fmt_ratio(x) for x in r["torch_over_flowgrad"]) + " |")
        lines += [""]

    lines += ["## Failures and disagreements", ""]
    problems = []
    for size in SIZES:
        sized = _as_run_results(results, size)
        problems += [f"- `{n}` ({size}): {err}" for n, e in sized["kernels"].items() for err in e["errors"]]
        problems += [f"- `{n}` ({size}): {system} gradient differs, scaled max error {err:.2e}"
                     for n, system, err in report.disagreements(sized)]
    lines += problems or [f"None at either size: every measurement ran, and every gradient (JAX, torch) agrees "
                          f"with flowgrad's to a scaled max error ≤ {results.get('bench_grad_tol', 1e-6):g}."]
    lines.append("")
    return "\n".join(lines)


def main(argv=None):
    """Measure (or re-render with ``--from``) and write growth.md; return the exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    ns = parse_args(argv)
    md_path = (Path(ns.out) if ns.out else run.SCRATCH) / "growth.md"
    if ns.from_json:
        results = json.loads(Path(ns.from_json).read_text())
    else:
        if ns.one_cpu:
            if not hasattr(os, "sched_setaffinity"):
                print("error: --one-cpu needs os.sched_setaffinity (Linux)", file=sys.stderr)
                return 2
            pin_to_one_cpu()
        try:
            results, json_path = measure(ns, argv)
        except run.UsageError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    md_path.parent.mkdir(parents=True, exist_ok=True)
    md_path.write_text(markdown(results))
    print(f"\nwrote {run._display_path(md_path)}")
    failed = sorted({n for s in SIZES for n, e in results["runs"][s].items() if e["errors"]})
    if failed:
        print(f"errors in {len(failed)} kernel(s): {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
