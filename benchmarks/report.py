"""Tables and the markdown report for ``benchmarks.run`` results (the dict saved as results.json).

``python -m benchmarks.report benchmarks/results/results.json --out benchmarks/RESULTS.md``
re-renders a report from saved numbers without measuring again.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

MIB = 1024.0 * 1024.0

# (key, heading, what it means) — the ratio columns, in report order.
RATIOS = (
    ("grad_over_fwd", "grad / fwd", "flowgrad gradient time / flowgrad forward time (same backend)"),
    ("grad_over_numpy", "grad / NumPy fwd", "flowgrad gradient time / plain NumPy forward time"),
    ("numpy_over_fwd", "NumPy fwd / fwd", "plain NumPy forward / flowgrad forward (> 1: flowgrad's forward is faster)"),
    ("jax_over_grad", "JAX / grad", "jit(jax.grad) run time / flowgrad gradient (> 1: flowgrad is faster)"),
    ("torch_over_grad", "torch / grad",
     "PyTorch autograd (forward + backward) / flowgrad gradient (> 1: flowgrad is faster)"),
)


# ---------------------------------------------------------------------------------------------
# Numbers out of one kernel's entry
# ---------------------------------------------------------------------------------------------


def median(timing):
    return timing["median_s"] if timing else None


def kernel_numbers(entry, backend):
    """Times (s), ratios, latency and memory of one kernel for one flowgrad backend (None: missing)."""
    fg = entry["flowgrad"].get(backend, {})
    jax, torch = entry.get("jax") or {}, entry.get("torch") or {}
    n = {
        "numpy_fwd": median(entry["numpy"].get("fwd")),
        "fwd": median(fg.get("fwd")),
        "grad": median(fg.get("grad")),
        "jax_grad": median(jax.get("grad")),
        "jax_compile": jax.get("compile_s"),
        "torch_grad": median(torch.get("grad")),
        "first_call": fg.get("first_call_grad_s"),
        "grad_peak": fg.get("grad_peak_bytes"),
        "numpy_peak": entry["numpy"].get("fwd_peak_bytes"),
    }

    def ratio(a, b):
        return n[a] / n[b] if n[a] and n[b] else None

    n["grad_over_fwd"] = ratio("grad", "fwd")
    n["grad_over_numpy"] = ratio("grad", "numpy_fwd")
    n["numpy_over_fwd"] = ratio("numpy_fwd", "fwd")
    n["jax_over_grad"] = ratio("jax_grad", "grad")
    n["torch_over_grad"] = ratio("torch_grad", "grad")
    return n


def geomean(values):
    values = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not values:
        return None, 0
    return math.exp(sum(math.log(v) for v in values) / len(values)), len(values)


def summary(results, backend):
    """``{ratio key: (geometric mean, number of kernels)}`` for one backend."""
    rows = [kernel_numbers(e, backend) for e in results["kernels"].values()]
    return {key: geomean([r[key] for r in rows]) for key, _, _ in RATIOS}


def disagreements(results):
    """``[(kernel, system, error)]`` where a gradient differs from the reference by more than the tolerance."""
    tol = results.get("bench_grad_tol", 1e-6)
    out = []
    for name, e in results["kernels"].items():
        systems = [(f"flowgrad[{b}]", r) for b, r in e["flowgrad"].items()]
        systems += [("jax", e.get("jax") or {}), ("torch", e.get("torch") or {})]
        for system, r in systems:
            for key, value in r.items():
                if key.startswith("grad_error_vs_") and (value is None or not value <= tol):
                    out.append((name, f"{system} vs flowgrad[{key[len('grad_error_vs_'):]}]", value))
            if "fwd_rel_error" in r and not r["fwd_rel_error"] <= tol:
                out.append((name, f"{system} forward vs NumPy", r["fwd_rel_error"]))
    return out


# ---------------------------------------------------------------------------------------------
# Formatting
# ---------------------------------------------------------------------------------------------


def fmt_ms(seconds):
    if seconds is None:
        return "–"
    ms = seconds * 1e3
    if ms >= 100:
        return f"{ms:.0f}"
    if ms >= 10:
        return f"{ms:.1f}"
    return f"{ms:.2f}"


def fmt_s(seconds):
    return "–" if seconds is None else f"{seconds:.3g}"


def fmt_ratio(r):
    if r is None:
        return "–"
    return f"{r:.1f}" if r >= 100 else f"{r:.2f}"


def fmt_mib(nbytes):
    if nbytes is None:
        return "–"
    mib = nbytes / MIB
    return f"{mib:.0f}" if mib >= 100 else f"{mib:.1f}" if mib >= 1 else f"{mib:.2f}"


SINGLE = "†"    # marks a time that is one call (its warm-up): too slow to repeat within the budget


def _time_cell(timing):
    if not timing:
        return "–"
    return fmt_ms(timing["median_s"]) + (SINGLE if timing.get("from_warmup") else "")


def _cells(entry, backend):
    """The table cells of one kernel for one backend (used on screen and in markdown)."""
    n = kernel_numbers(entry, backend)
    fg = entry["flowgrad"].get(backend, {})
    jax, torch = entry.get("jax"), entry.get("torch")
    fwd = "error" if "fwd_error" in fg else _time_cell(fg.get("fwd"))
    grad = "error" if "grad_error" in fg else _time_cell(fg.get("grad"))
    if jax is None:
        jax_cells = ["–", "–", "–"]
    elif "note" in jax:
        jax_cells = ["n/a", "–", "–"]
    elif "error" in jax:
        jax_cells = ["error", "–", "–"]
    else:
        jax_cells = [_time_cell(jax.get("grad")), fmt_s(n["jax_compile"]), fmt_ratio(n["jax_over_grad"])]
    if torch is None:
        torch_cells = ["–", "–"]
    elif "error" in torch:
        torch_cells = ["error", "–"]
    else:
        torch_cells = [_time_cell(torch.get("grad")), fmt_ratio(n["torch_over_grad"])]
    return ([_time_cell(entry["numpy"].get("fwd")), fwd, grad, fmt_ratio(n["grad_over_fwd"]), fmt_ratio(n["grad_over_numpy"]),
             fmt_ratio(n["numpy_over_fwd"])] + jax_cells + torch_cells +
            [fmt_s(n["first_call"]), fmt_mib(n["grad_peak"]), fmt_mib(n["numpy_peak"])])


HEADINGS = ["NumPy fwd ms", "fwd ms", "grad ms", "grad / fwd", "grad / NumPy fwd", "NumPy fwd / fwd",
            "JAX grad ms", "JAX compile s", "JAX / grad", "torch grad ms", "torch / grad",
            "first call s", "grad peak MiB", "NumPy fwd peak MiB"]
SCREEN_HEADINGS = ["np fwd", "fwd", "grad", "g/f", "g/np", "np/f", "jax", "jax c", "jax/g", "torch",
                   "t/g", "first", "peak", "np pk"]
# Which columns hold ratios, so that a geometric-mean row can fill them.
RATIO_COLUMNS = {3: "grad_over_fwd", 4: "grad_over_numpy", 5: "numpy_over_fwd", 8: "jax_over_grad",
                 10: "torch_over_grad"}


def _geomean_cells(results, backend):
    means = summary(results, backend)
    return [fmt_ratio(means[RATIO_COLUMNS[i]][0]) if i in RATIO_COLUMNS else "" for i in range(len(HEADINGS))]


# ---------------------------------------------------------------------------------------------
# Screen
# ---------------------------------------------------------------------------------------------


def header_line(results):
    m = results["machine"]
    v = m["versions"]
    systems = ["numpy " + str(v.get("numpy"))] + [f"flowgrad[{b}]" for b in results["backends"]]
    systems.append(f"jax {v.get('jax')}" if results["jax"] else "no jax")
    systems.append(f"torch {v.get('torch')}" if results["torch"] else "no torch")
    return (f"{len(results['kernel_names'])} kernels at {results['size']} size on "
            f"{m['cpu_count']} CPUs ({m['cpu_model']}): {', '.join(systems)}")


def progress_line(name, entry, backends):
    parts = [f"{name:22s} numpy {fmt_ms(median(entry['numpy'].get('fwd')))} ms"]
    for b in backends:
        n = kernel_numbers(entry, b)
        fg = entry["flowgrad"].get(b, {})
        fwd = "ERROR" if "fwd_error" in fg else fmt_ms(n["fwd"])
        grad = "ERROR" if "grad_error" in fg else fmt_ms(n["grad"])
        parts.append(f"{b}: fwd {fwd} grad {grad} ms (first {fmt_s(n['first_call'])} s, "
                     f"peak {fmt_mib(n['grad_peak'])} MiB)")
    jax, torch = entry.get("jax"), entry.get("torch")
    if jax is not None:
        if "note" in jax:
            parts.append("jax n/a")
        elif "error" in jax:
            parts.append("jax ERROR")
        else:
            parts.append(f"jax {fmt_ms(median(jax['grad']))} ms (compile {fmt_s(jax['compile_s'])} s)")
    if torch is not None:
        parts.append("torch ERROR" if "error" in torch else f"torch {fmt_ms(median(torch['grad']))} ms")
    line = " | ".join(parts) + f"  [{entry['wall_s']:.1f} s]"
    for err in entry["errors"]:
        line += "\n      " + err
    return line


def screen_table(results):
    blocks = []
    for backend in results["backends"]:
        rows = [[name] + _cells(e, backend) for name, e in results["kernels"].items()]
        rows.append(["geomean"] + _geomean_cells(results, backend))
        head = [f"flowgrad[{backend}]"] + SCREEN_HEADINGS
        widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
        lines = ["  ".join(h.rjust(w) if i else h.ljust(w) for i, (h, w) in enumerate(zip(head, widths)))]
        for r in rows:
            lines.append("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))))
        blocks.append("\n".join(lines))
    legend = ("times in ms (median), first call and JAX compile in s, peak in MiB; g/f = grad/fwd, "
              "g/np = grad/NumPy fwd, np/f = NumPy fwd/fwd, jax/g and t/g = JAX or torch grad / flowgrad grad")
    return "\n\n".join(blocks) + "\n" + legend


# ---------------------------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------------------------


def _md_row(cells):
    return "| " + " | ".join(cells) + " |"


def _load_text(results):
    m = results["machine"]
    during = [e.get("loadavg_1min_after") for e in results["kernels"].values()]
    during = [v for v in during if v is not None]
    parts = [f"start {m['loadavg_1min_start']:.2f}" if m.get("loadavg_1min_start") is not None else None,
             f"max after a kernel {max(during):.2f}" if during else None,
             f"end {m['loadavg_1min_end']:.2f}" if m.get("loadavg_1min_end") is not None else None]
    return ", ".join(p for p in parts if p) or "not recorded"


def _busy_warning(results):
    m = results["machine"]
    loads = [e.get("loadavg_1min_after") for e in results["kernels"].values()] + [m.get("loadavg_1min_start")]
    loads = [v for v in loads if v is not None]
    if loads and m.get("cpu_count") and max(loads) > m["cpu_count"] - 0.5:
        return (". **The machine was busy during this run**: multi-threaded libraries (BLAS, PyTorch, XLA) "
                "suffer most from that; see the caveats in `benchmarks/README.md`")
    return ""


def _machine_lines(results):
    m = results["machine"]
    v = m["versions"]
    blas = m.get("threadpools")
    if isinstance(blas, list):
        blas_text = "; ".join(
            " ".join(filter(None, (p["internal_api"], p.get("version")))) + f" ({p['prefix']}, "
            f"{p['num_threads']} threads" + (f", {p['architecture']}" if p.get("architecture") else "") + ")"
            for p in blas)
    else:
        blas_text = str(blas)
    env = ", ".join(f"{k}={val}" for k, val in m["thread_env"].items() if val is not None) or "none set"
    versions = ", ".join(f"{k} {val}" for k, val in v.items() if val is not None)
    return [
        f"- Date: {m['date']}; {results['total_wall_s']:.0f} s in total" if "total_wall_s" in results
        else f"- Date: {m['date']}",
        f"- Machine: {m['cpu_model']}, {m['cpu_count']} CPUs ({m['cpu_affinity']} usable), {m['platform']}, "
        f"Python {m['python']}",
        f"- Versions: {versions}",
        f"- Thread pools: {blas_text}; torch threads: {m['torch_threads']}; "
        f"flowgrad native (Numba) threads: {m.get('numba_threads')}",
        f"- Thread/BLAS environment variables: {env}",
        f"- 1-minute load average: {_load_text(results)} (on {m['cpu_count']} cores: above ~{m['cpu_count'] - 1} "
        "means other work shared the machine)" + _busy_warning(results),
        f"- Timing: median of adaptive repeats after one warm-up call, about {results['budget_s_per_kernel']:g} s "
        f"of repeats per kernel, every system's in {results.get('rounds', 1)} interleaved rounds" + (f", {results['repeat']} repeats each" if results.get("repeat") else "")
        + ("; --quick" if results.get("quick") else ""),
        f"- Compiled-code cache for first calls: {results.get('compile_cache', 'not recorded')}",
    ]


def _command_with_env(results):
    """The command, prefixed by the thread/BLAS variables that were set when it ran."""
    import shlex

    env = [f"{k}={shlex.quote(v)}" for k, v in results["machine"]["thread_env"].items() if v is not None]
    return " ".join(env + [results["command"]])


def _kernel_count(results):
    from . import kernels as corpus

    n = len(results["kernels"])
    return f"all {n} kernels of `benchmarks/kernels/`" if n == len(corpus.NAMES) else \
        f"{n} of the {len(corpus.NAMES)} kernels of `benchmarks/kernels/`"


def markdown(results):
    backends = results["backends"]
    kernels = results["kernels"]
    lines = [
        "# flowgrad benchmark results",
        "",
        f"Generated by `{_command_with_env(results)}`: {_kernel_count(results)} at "
        f"`{results['size']}` size, all systems in one process on one machine. Raw numbers: "
        f"`{results['json_path']}`. How to read this: `benchmarks/README.md`. The machine is shared "
        "and small: **compare ratios, not absolute times.**",
        "",
    ]
    lines += _machine_lines(results)
    if results.get("unavailable_backends"):
        for b, why in results["unavailable_backends"].items():
            lines.append(f"- flowgrad backend `{b}` was not available: {why}")
    lines += ["", "## Summary: geometric means over the kernels", ""]
    lines.append(_md_row(["ratio"] + [f"flowgrad[{b}]" for b in backends] + ["meaning"]))
    lines.append(_md_row(["---"] + ["---:"] * len(backends) + ["---"]))
    sums = {b: summary(results, b) for b in backends}
    for key, heading, meaning in RATIOS:
        cells = []
        for b in backends:
            mean, count = sums[b][key]
            cells.append(f"{fmt_ratio(mean)} (n={count})")
        lines.append(_md_row([heading] + cells + [meaning]))
    lines += ["", "JAX and torch means cover only the kernels that have a JAX or torch twin, so they "
              "are means over different subsets.", ""]

    if len(backends) > 1:
        lines += _backend_comparison(results)

    for b in backends:
        lines += [f"## Per kernel: flowgrad backend `{b}`", ""]
        lines.append(_md_row(["kernel"] + HEADINGS))
        lines.append(_md_row(["---"] + ["---:"] * len(HEADINGS)))
        for name, e in kernels.items():
            lines.append(_md_row([f"`{name}`"] + _cells(e, b)))
        lines.append(_md_row(["**geometric mean**"] + [f"**{c}**" if c not in ("", "–") else c
                                                       for c in _geomean_cells(results, b)]))
        lines += [""]
        if any(SINGLE in c for e in kernels.values() for c in _cells(e, b)):
            lines += [f"{SINGLE} one call only: its warm-up alone took over 3 × its share of the budget.", ""]
        lines += _slowest(results, b)

    notes = [(name, e["jax"]["note"]) for name, e in kernels.items() if e.get("jax") and "note" in e["jax"]]
    if notes:
        lines += ["## Kernels JAX cannot reverse-differentiate as written", "",
                  "Their `jax_kernel` twin is missing on purpose; the reason, from each kernel's `JAX_NOTE`:", ""]
        lines += [f"- `{name}`: {note}" for name, note in notes]
        lines += [""]

    lines += ["## Failures and disagreements", ""]
    errors = [(name, err) for name, e in kernels.items() for err in e["errors"]]
    diffs = disagreements(results)
    if not errors and not diffs:
        lines += [f"None: every measurement ran, and every gradient (flowgrad backends, JAX, torch) agrees with "
                  f"flowgrad's first backend to a scaled max error ≤ {results.get('bench_grad_tol', 1e-6):g}.", ""]
    for name, err in errors:
        lines.append(f"- `{name}`: {err}")
    for name, system, err in diffs:
        lines.append(f"- `{name}`: {system} gradient differs, scaled max error {err:.2e}")
    if errors or diffs:
        lines.append("")
    return "\n".join(lines)


def _slowest(results, backend, count=5):
    rows = [(name, kernel_numbers(e, backend)) for name, e in results["kernels"].items()]
    by_time = sorted((r for r in rows if r[1]["grad"]), key=lambda r: -r[1]["grad"])[:count]
    by_ratio = sorted((r for r in rows if r[1]["grad_over_numpy"]), key=lambda r: -r[1]["grad_over_numpy"])[:count]
    if not by_time:
        return []
    return [
        f"Slowest gradients (`{backend}`): " + ", ".join(f"`{n}` {fmt_ms(r['grad'])} ms" for n, r in by_time) + ".",
        "",
        f"Largest gradient / NumPy forward ratios (`{backend}`): "
        + ", ".join(f"`{n}` {fmt_ratio(r['grad_over_numpy'])}" for n, r in by_ratio) + ".",
        "",
    ]


def _backend_comparison(results):
    backends = results["backends"]
    ref = backends[0]
    lines = [f"## flowgrad backends against `{ref}`", "",
             _md_row(["kernel"] + [f"{b} fwd / {ref} fwd" for b in backends[1:]] +
                     [f"{b} grad / {ref} grad" for b in backends[1:]]),
             _md_row(["---"] + ["---:"] * (2 * (len(backends) - 1)))]
    columns = {}
    for name, e in results["kernels"].items():
        base = kernel_numbers(e, ref)
        cells = []
        for kind in ("fwd", "grad"):
            for b in backends[1:]:
                other = kernel_numbers(e, b)
                r = other[kind] / base[kind] if other[kind] and base[kind] else None
                columns.setdefault((kind, b), []).append(r)
                cells.append(fmt_ratio(r))
        lines.append(_md_row([f"`{name}`"] + cells))
    means = [fmt_ratio(geomean(columns[(kind, b)])[0]) for kind in ("fwd", "grad") for b in backends[1:]]
    lines.append(_md_row(["**geometric mean**"] + [f"**{m}**" for m in means]))
    return lines + [""]


def main(argv=None):
    """Render RESULTS.md from a saved results.json; return the exit code."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.report",
                                description="Re-render the markdown report from a saved results.json.")
    p.add_argument("results", help="path of a results.json written by benchmarks.run")
    p.add_argument("--out", default=None, help="write the report here (default: print it)")
    ns = p.parse_args(argv)
    results = json.loads(Path(ns.results).read_text())
    text = markdown(results)
    if ns.out:
        Path(ns.out).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
