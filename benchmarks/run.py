"""Benchmark flowgrad on the kernel corpus, side by side with NumPy, JAX and PyTorch.

Usage (from the repository root)::

    python -m benchmarks.run                       # every kernel at bench size; report in benchmarks/results/
    python -m benchmarks.run --size test --kernels heat_1d_explicit,cholesky
    python -m benchmarks.run --out benchmarks      # benchmarks/RESULTS.md + benchmarks/results/results.json
    python -m benchmarks.run --check               # values and gradients of the JAX/torch twins (test size)

Everything runs in one process on one machine, so the ratios compare like with like. Per
kernel: NumPy's forward; for every available flowgrad backend (``flowgrad.api.BACKENDS``) the
forward (``flowgrad.jit``), the gradient (``flowgrad.grad``), the first-call latency of a fresh
transform and the gradient's peak memory; ``jax.jit(jax.grad(jax_kernel))`` with its compile
time; and PyTorch autograd of the twin in ``benchmarks/torch_kernels.py``. Each timing is the
median of repeated calls after one excluded warm-up call, with fresh copies of the arguments
made outside the timed region; a kernel's systems are timed in interleaved rounds, so a change
in the machine's load falls on all of them alike. ``benchmarks/README.md`` explains the columns and the caveats.
"""
from __future__ import annotations

import argparse
import datetime
import functools
import gc
import importlib.metadata
import inspect
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

from . import kernels, report

HERE = Path(__file__).resolve().parent
SCRATCH = HERE / "results"

# Environment variables that decide how many threads BLAS, OpenMP, XLA and Numba use, or which
# OpenBLAS kernel runs. They are recorded, never changed (README.md says why and how to unset
# OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE for one command).
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS",
               "NUMBA_THREADING_LAYER", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "XLA_FLAGS",
               "TF_NUM_INTEROP_THREADS", "TF_NUM_INTRAOP_THREADS", "FLOWGRAD_PARALLEL")

# Agreement between systems at bench size (scaled max error, see ``max_error``): above this
# the report lists the kernel. ``--check`` (test size) uses the stricter tolerances below.
BENCH_GRAD_TOL = 1e-6

# Rounds a kernel's measurements are interleaved in (``Timer.interleaved``).
ROUNDS = 4
CHECK_VALUE_RTOL = 1e-10
CHECK_GRAD_RTOL = 1e-8


# ---------------------------------------------------------------------------------------------
# Optional systems
# ---------------------------------------------------------------------------------------------


def import_jax():
    """``jax`` with float64 enabled, or None when it is not installed."""
    try:
        import jax
    except ImportError:
        return None
    jax.config.update("jax_enable_x64", True)
    return jax


def import_torch():
    """``(torch, TORCH_KERNELS)``, or ``(None, {})`` when PyTorch is not installed."""
    try:
        import torch
    except ImportError:
        return None, {}
    from .torch_kernels import TORCH_KERNELS
    return torch, TORCH_KERNELS


def _probe(x):
    return np.sum(x * x)


def flowgrad_backends():
    """The entries of ``flowgrad.api.BACKENDS`` that run here, and why the others do not."""
    import flowgrad
    from flowgrad import api

    available, unavailable = [], {}
    for backend in api.BACKENDS:
        try:
            flowgrad.jit(_probe, backend=backend)(np.arange(3.0))
            available.append(backend)
        except Exception as exc:  # a missing compiler, an unfinished backend: report, do not stop
            unavailable[backend] = f"{type(exc).__name__}: {exc}"
    return available, unavailable


# ---------------------------------------------------------------------------------------------
# Measurement
# ---------------------------------------------------------------------------------------------


def fresh(args):
    """Copies of the array arguments (the NumPy kernels update their inputs in place)."""
    return tuple(np.copy(a) if isinstance(a, np.ndarray) else a for a in args)


def _no_sync(out):
    return out


def timed_call(call, args, sync=_no_sync):
    """Seconds for one ``sync(call(*args))``, with the garbage collector off (as ``timeit`` does)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter()
        out = sync(call(*args))
        elapsed = time.perf_counter() - start
    finally:
        if enabled:
            gc.enable()
    return elapsed, out


class Timer:
    """Median of repeated calls after one warm-up call; the repeat count adapts to a time share.

    Args:
      share_s: seconds the timed repetitions of one measurement may take (roughly).
      repeat: a fixed number of timed repetitions instead of the adaptive count.
      min_repeat, max_repeat: bounds of the adaptive count, except that a call so slow that
        ``min_repeat`` of them overrun ``share_s`` is timed only as often as fits (at least once),
        and one whose warm-up took over 3 × ``share_s`` is not repeated: the warm-up is the sample
        (marked ``from_warmup``).
    """

    def __init__(self, share_s, repeat=None, min_repeat=3, max_repeat=400):
        self.share_s, self.repeat = share_s, repeat
        self.min_repeat, self.max_repeat = min_repeat, max_repeat

    def count(self, warmup_s):
        if self.repeat is not None:
            return self.repeat
        n = int(self.share_s / max(warmup_s, 1e-9))
        if n < self.min_repeat:             # a slow call: keep the time bounded rather than the count
            return max(1, n)
        return min(self.max_repeat, n)

    def run(self, call, make_args, sync=_no_sync):
        """``(timing dict, output of the last call)``; ``make_args()`` runs outside the timed region."""
        job = self.warm(call, make_args, sync)
        self.interleaved([job], rounds=1)
        return job.timing, job.out

    def warm(self, call, make_args, sync=_no_sync):
        """A ``Job`` for ``call``, after its warm-up call (excluded from the timing, its output kept)."""
        gc.collect()
        warmup_s, out = timed_call(call, make_args(), sync)
        return Job(call, make_args, sync, warmup_s, out)

    def interleaved(self, jobs, rounds=ROUNDS):
        """Time ``jobs`` (``warm``) in ``rounds`` rounds, each running every job's share of its
        repeats in turn, so that a change in the machine's load while a kernel is measured
        falls on every system alike instead of on whichever ran then. Sets each job's
        ``timing`` (its ``out``: the last call's output)."""
        counts = {}
        for job in jobs:
            if self.repeat is None and job.warmup_s > 3 * self.share_s:
                # Far over its share (a Python loop of tiny torch ops, say): one more call would double
                # the kernel's time for little information, so the warm-up call is the sample.
                job.timing = {"median_s": job.warmup_s, "min_s": job.warmup_s, "repeats": 0,
                              "warmup_s": job.warmup_s, "times_s": [], "from_warmup": True}
            else:
                counts[id(job)] = self.count(job.warmup_s)
        for r in range(rounds):
            for job in jobs:
                n = counts.get(id(job), 0) if job.error is None else 0
                try:
                    for _ in range(n * (r + 1) // rounds - n * r // rounds):    # the round's share of n
                        args = job.make_args()
                        elapsed, job.out = timed_call(job.call, args, job.sync)
                        job.times.append(elapsed)
                        del args
                except Exception as exc:        # a call that ran once and failed when repeated
                    job.error = exc
        for job in jobs:
            if id(job) in counts and job.error is None:
                job.timing = {"median_s": statistics.median(job.times), "min_s": min(job.times),
                              "repeats": len(job.times), "warmup_s": job.warmup_s, "times_s": job.times}


class Job:
    """One measurement: a call, how to make its arguments, its warm-up and the times so far."""

    def __init__(self, call, make_args, sync, warmup_s, out):
        self.call, self.make_args, self.sync, self.warmup_s, self.out = call, make_args, sync, warmup_s, out
        self.times, self.timing, self.error = [], None, None


def first_call(make_transform, make_args):
    """Seconds for the first call of a fresh transform (capture, compile and one run)."""
    gc.collect()
    transform = make_transform()
    elapsed, out = timed_call(transform, make_args())
    return elapsed, transform, out


def peak_memory(call, make_args):
    """Peak bytes that ``tracemalloc`` sees one call allocate above what was live before it.

    NumPy registers its array buffers with tracemalloc, and Numba's runtime allocates through
    ``PyMem_RawMalloc``, which tracemalloc also traces (checked with numba 0.68: an array made
    inside an ``@njit`` function shows up). Not seen: BLAS work buffers and the allocators of
    PyTorch and XLA, so this is reported for NumPy and flowgrad only.
    """
    args = make_args()
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        call(*args)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return max(0, peak - base)


def as_arrays(values):
    """A gradient (one value or a tuple) as a list of float64 NumPy arrays."""
    if not isinstance(values, (tuple, list)):
        values = (values,)
    out = []
    for v in values:
        if hasattr(v, "detach"):        # torch tensor
            v = v.detach().numpy()
        out.append(np.asarray(v, dtype=np.float64))
    return out


def max_error(ours, reference):
    """Largest ``max|a - b| / max|b|`` over the gradient entries (inf when the shapes differ)."""
    worst = 0.0
    ours, reference = as_arrays(ours), as_arrays(reference)
    if len(ours) != len(reference):
        return float("inf")
    for a, b in zip(ours, reference):
        if a.shape != b.shape:
            return float("inf")
        if not a.size:
            continue
        scale = max(float(np.max(np.abs(b))), 1e-300)
        worst = max(worst, float(np.max(np.abs(a - b))) / scale)
    return worst


def relative_error(value, reference):
    value, reference = float(value), float(reference)
    return abs(value - reference) / max(abs(reference), 1e-300)


def _error_text(exc):
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 400 else text[:397] + "..."


# ---------------------------------------------------------------------------------------------
# The systems: how each one is called on a corpus kernel
# ---------------------------------------------------------------------------------------------


def wrt_positions(mod):
    params = list(inspect.signature(mod.kernel).parameters)
    return tuple(params.index(w) for w in mod.WRT)


def jax_setup(jax, mod, args):
    """``(make_jitted, jax_args)``: ``make_jitted()`` is a fresh ``jit(grad(jax_kernel))``.

    Integer and boolean scalars (step counts, head counts) are static, as jit needs them to be;
    float scalars and arrays are traced.
    """
    static = tuple(i for i, a in enumerate(args)
                   if isinstance(a, (bool, int, np.integer, np.bool_)) and not isinstance(a, np.ndarray))
    argnums = wrt_positions(mod)
    jax_args = tuple(jax.device_put(a) if isinstance(a, np.ndarray) else a for a in args)

    def make_jitted():
        return jax.jit(jax.grad(mod.jax_kernel, argnums=argnums), static_argnums=static)

    return make_jitted, jax_args, static


def torch_setup(torch, fn, mod, args):
    """``(grad_call, make_args)`` for PyTorch autograd of ``fn`` w.r.t. the kernel's WRT."""
    params = list(inspect.signature(mod.kernel).parameters)
    positions = wrt_positions(mod)

    def make_args():
        out = []
        for name, a in zip(params, args):
            if isinstance(a, np.ndarray):
                t = torch.from_numpy(np.array(a))        # float64 stays float64, int64 stays int64
            elif isinstance(a, (float, np.floating)):
                t = torch.tensor(float(a), dtype=torch.float64)
            else:
                out.append(a)
                continue
            if name in mod.WRT:
                t.requires_grad_(True)
            out.append(t)
        return tuple(out)

    def grad_call(*targs):
        value = fn(*targs)
        return torch.autograd.grad(value, [targs[i] for i in positions], allow_unused=True,
                                   materialize_grads=True)

    return grad_call, make_args


# ---------------------------------------------------------------------------------------------
# One kernel
# ---------------------------------------------------------------------------------------------


class Context:
    """What every kernel's measurement needs: size, timer settings and the optional systems."""

    def __init__(self, size, budget_s, repeat, quick, backends, jax, torch, torch_kernels):
        self.size, self.budget_s, self.repeat, self.quick = size, budget_s, repeat, quick
        self.backends, self.jax, self.torch, self.torch_kernels = backends, jax, torch, torch_kernels

    def timer(self, mod, name):
        count = 1 + 2 * len(self.backends)
        count += bool(self.jax and hasattr(mod, "jax_kernel"))
        count += bool(self.torch and name in self.torch_kernels)
        if self.quick:
            return Timer(self.budget_s / count, self.repeat, min_repeat=1, max_repeat=5)
        return Timer(self.budget_s / count, self.repeat)


def bench_kernel(name, ctx):
    """All measurements for one corpus kernel, as a JSON-ready dict (errors recorded, not raised).

    Every system's calls are first made once (first calls, compiles, warm-ups), then timed
    together, interleaved (``Timer.interleaved``), then checked against each other."""
    import flowgrad

    mod = kernels.load(name)
    args = mod.args(ctx.size, seed=0)
    timer = ctx.timer(mod, name)
    make = functools.partial(fresh, args)
    entry = {"doc": (mod.__doc__ or "").strip().split("\n")[0],
             "wrt": list(mod.WRT), "arg_shapes": [list(a.shape) if isinstance(a, np.ndarray) else repr(a)
                                                  for a in args],
             "numpy": {}, "flowgrad": {}, "jax": None, "torch": None, "errors": []}
    entry["loadavg_1min_before"] = _loadavg()
    start = time.perf_counter()
    timed = []          # (where the timing goes, its key, the warmed-up job, the key of a failure, its name)
    peaks = []          # (where the peak goes, its key, the call)

    def warm(into, key, call, make_args, what, sync=_no_sync, error_key="error"):
        job = timer.warm(call, make_args, sync)
        timed.append((into, key, job, error_key, what))
        return job.out

    try:
        value = warm(entry["numpy"], "fwd", mod.kernel, make, "numpy forward")
        entry["numpy"]["value"] = float(value)
        peaks.append((entry["numpy"], "fwd_peak_bytes", mod.kernel))
    except Exception as exc:
        entry["numpy"]["error"] = _error_text(exc)
        entry["errors"].append(f"numpy forward: {_error_text(exc)}")
        value = None

    flowgrad_grads = []                 # (backend, its gradient's entry, the gradient)
    for backend in ctx.backends:
        res = entry["flowgrad"][backend] = {}
        try:
            res["first_call_fwd_s"], fwd, _ = first_call(functools.partial(flowgrad.jit, mod.kernel, backend=backend), make)
            fvalue = warm(res, "fwd", fwd.wait(), make, f"flowgrad[{backend}] forward",     # native code, once compiled
                          error_key="fwd_error")
            if value is not None:
                res["fwd_rel_error"] = relative_error(fvalue, value)
        except Exception as exc:
            res["fwd_error"] = _error_text(exc)
            entry["errors"].append(f"flowgrad[{backend}] forward: {_error_text(exc)}")
        try:
            res["first_call_grad_s"], g, _ = first_call(
                functools.partial(flowgrad.grad, mod.kernel, wrt=mod.WRT, backend=backend), make)
            grads = warm(res, "grad", g.wait(), make, f"flowgrad[{backend}] gradient", error_key="grad_error")
            flowgrad_grads.append((backend, res, grads))
            peaks.append((res, "grad_peak_bytes", g))
        except Exception as exc:
            res["grad_error"] = _error_text(exc)
            entry["errors"].append(f"flowgrad[{backend}] gradient: {_error_text(exc)}")

    twins = []                          # (entry, its gradient)
    if ctx.jax is not None:
        entry["jax"] = jax_entry = {}
        if hasattr(mod, "jax_kernel"):
            jax = ctx.jax
            try:
                make_jitted, jax_args, _ = jax_setup(jax, mod, args)
                jitted = make_jitted()
                t0 = time.perf_counter()
                jitted.lower(*jax_args).compile()
                jax_entry["compile_s"] = time.perf_counter() - t0
                twins.append((jax_entry, warm(jax_entry, "grad", jitted, lambda: jax_args, "jax",
                                              sync=jax.block_until_ready)))
            except Exception as exc:
                jax_entry["error"] = _error_text(exc)
                entry["errors"].append(f"jax: {_error_text(exc)}")
        else:
            jax_entry["note"] = getattr(mod, "JAX_NOTE", "no jax_kernel")

    if ctx.torch is not None and name in ctx.torch_kernels:
        entry["torch"] = torch_entry = {}
        try:
            grad_call, make_targs = torch_setup(ctx.torch, ctx.torch_kernels[name], mod, args)
            twins.append((torch_entry, warm(torch_entry, "grad", grad_call, make_targs, "torch")))
        except Exception as exc:
            torch_entry["error"] = _error_text(exc)
            entry["errors"].append(f"torch: {_error_text(exc)}")

    timer.interleaved([job for _, _, job, _, _ in timed])
    for into, key, job, error_key, what in timed:
        if job.error is None:
            into[key] = job.timing
        else:
            into[error_key] = _error_text(job.error)
            entry["errors"].append(f"{what}: {_error_text(job.error)}")
    for into, key, call in peaks:
        into[key] = peak_memory(call, make)

    # the first backend's gradient is what the others (backends, twins) are compared to
    if flowgrad_grads:
        ref_backend, _, reference = flowgrad_grads[0]
        for backend, res, grads in flowgrad_grads[1:]:
            res["grad_error_vs_" + ref_backend] = max_error(grads, reference)
        for twin_entry, grads in twins:
            twin_entry["grad_error_vs_" + ref_backend] = max_error(grads, reference)

    entry["wall_s"] = time.perf_counter() - start
    entry["loadavg_1min_after"] = _loadavg()
    return entry


# ---------------------------------------------------------------------------------------------
# --check: the twins against flowgrad
# ---------------------------------------------------------------------------------------------


def check_kernel(name, ctx):
    """``[(system, ok, detail)]``: values against NumPy, gradients against flowgrad's first backend."""
    import flowgrad

    mod = kernels.load(name)
    args = mod.args(ctx.size, seed=0)
    value = float(mod.kernel(*fresh(args)))
    rows = []

    def value_ok(v):
        err = relative_error(v, value)
        return err <= CHECK_VALUE_RTOL, f"value rel err {err:.1e}"

    reference = None
    for backend in ctx.backends:
        try:
            ok, detail = value_ok(flowgrad.jit(mod.kernel, backend=backend)(*fresh(args)))
            grads = flowgrad.grad(mod.kernel, wrt=mod.WRT, backend=backend)(*fresh(args))
            if reference is None:
                reference = (backend, grads)
            else:
                err = max_error(grads, reference[1])
                ok = ok and err <= CHECK_GRAD_RTOL
                detail += f", grad err vs {reference[0]} {err:.1e}"
        except Exception as exc:
            ok, detail = False, _error_text(exc)
        rows.append((f"flowgrad[{backend}]", ok, detail))
    if reference is None:
        return rows

    if ctx.jax is not None and hasattr(mod, "jax_kernel"):
        jax = ctx.jax
        try:
            make_jitted, jax_args, static = jax_setup(jax, mod, args)
            ok, detail = value_ok(jax.jit(mod.jax_kernel, static_argnums=static)(*jax_args))
            err = max_error(make_jitted()(*jax_args), reference[1])
            ok = ok and err <= CHECK_GRAD_RTOL
            rows.append(("jax", ok, detail + f", grad err {err:.1e}"))
        except Exception as exc:
            rows.append(("jax", False, _error_text(exc)))

    if ctx.torch is not None and name in ctx.torch_kernels:
        try:
            fn = ctx.torch_kernels[name]
            grad_call, make_targs = torch_setup(ctx.torch, fn, mod, args)
            with ctx.torch.no_grad():
                ok, detail = value_ok(fn(*make_targs()))
            err = max_error(grad_call(*make_targs()), reference[1])
            ok = ok and err <= CHECK_GRAD_RTOL
            rows.append(("torch", ok, detail + f", grad err {err:.1e}"))
        except Exception as exc:
            rows.append(("torch", False, _error_text(exc)))
    return rows


# ---------------------------------------------------------------------------------------------
# Machine description
# ---------------------------------------------------------------------------------------------


def _version(dist):
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _loadavg():
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def _numba_threads():
    try:
        import numba
    except ImportError:
        return None
    return numba.get_num_threads()


def machine_info(torch):
    """CPU, versions and thread settings: everything a reader needs to weigh the numbers."""
    info = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "python": sys.version.split()[0],
        "versions": {d: _version(d) for d in ("flowgrad", "numpy", "scipy", "jax", "jaxlib", "torch",
                                              "numba", "llvmlite", "threadpoolctl")},
        "thread_env": {v: os.environ.get(v) for v in THREAD_VARS},
        "torch_threads": torch.get_num_threads() if torch is not None else None,
        "numba_threads": _numba_threads(),
        "loadavg_1min_start": _loadavg(),
    }
    try:
        import threadpoolctl

        info["threadpools"] = [{k: p.get(k) for k in ("user_api", "internal_api", "prefix", "version",
                                                       "num_threads", "threading_layer", "architecture")}
                               for p in threadpoolctl.threadpool_info()]
    except ImportError:
        info["threadpools"] = "threadpoolctl is not installed"
    return info


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.run",
        description="Benchmark flowgrad against NumPy, JAX and PyTorch on the kernel corpus.")
    p.add_argument("--size", choices=("bench", "bench4", "test"), default=None,
                   help="problem sizes from each kernel's SIZES (default: bench; test with --check); "
                        "bench4 is four times bench's work")
    p.add_argument("--kernels", default=None, help="comma-separated kernel names (default: all)")
    p.add_argument("--repeat", type=int, default=None,
                   help="timed repetitions per measurement (default: adaptive, within --budget)")
    p.add_argument("--budget", type=float, default=None,
                   help="seconds of timed repetitions per kernel, shared by its measurements "
                        "(default: 8 at bench size, 2 at test size or with --quick)")
    p.add_argument("--out", default=None,
                   help="write DIR/RESULTS.md and DIR/results/results.json (default: both in "
                        "benchmarks/results/, which git ignores)")
    p.add_argument("--quick", action="store_true", help="at most 5 repetitions and a 2 s budget per kernel")
    p.add_argument("--backends", default=None,
                   help="comma-separated flowgrad backends (default: every available one in flowgrad.api.BACKENDS)")
    p.add_argument("--cold-cache", action="store_true",
                   help="point FLOWGRAD_CACHE_DIR at a new empty directory for this run, so that first-call "
                        "latencies include compiling (the native backend caches compiled code on disk)")
    p.add_argument("--one-cpu", action="store_true",
                   help="pin the whole process (every system measured) to one CPU before JAX or PyTorch "
                        "start: XLA runs its CPU work on several threads even with "
                        "--xla_cpu_multi_thread_eigen=false, so thread settings alone do not make a "
                        "single-core comparison")
    p.add_argument("--no-jax", action="store_true", help="skip JAX even when it is installed")
    p.add_argument("--no-torch", action="store_true", help="skip PyTorch even when it is installed")
    p.add_argument("--check", action="store_true",
                   help="check the JAX and torch twins (values vs NumPy, gradients vs flowgrad) instead of timing")
    ns = p.parse_args(argv)
    if ns.repeat is not None and ns.repeat < 1:
        p.error("--repeat must be at least 1")
    return ns


class UsageError(Exception):
    """A bad kernel or backend name on the command line."""


def _select_kernels(spec):
    if not spec:
        return list(kernels.NAMES)
    names = [n.strip() for n in spec.split(",") if n.strip()]
    unknown = [n for n in names if n not in kernels.NAMES]
    if unknown:
        raise UsageError(f"unknown kernel(s): {', '.join(unknown)}; the corpus is benchmarks.kernels.NAMES")
    return names


def _select_backends(spec):
    available, unavailable = flowgrad_backends()
    for b, why in unavailable.items():
        print(f"flowgrad backend {b!r} is not available here: {why}")
    if spec:
        wanted = [b.strip() for b in spec.split(",") if b.strip()]
        missing = [b for b in wanted if b not in available]
        if missing:
            raise UsageError(f"flowgrad backend(s) not available: {', '.join(missing)} "
                             f"(available: {', '.join(available) or 'none'})")
        available = wanted
    return available, unavailable


def run_check(names, ctx):
    failures = 0
    for i, name in enumerate(names, 1):
        rows = check_kernel(name, ctx)
        failures += sum(not ok for _, ok, _ in rows)
        cells = "; ".join(f"{system} {'ok' if ok else 'FAIL'} ({detail})" for system, ok, detail in rows)
        print(f"[{i:2d}/{len(names)}] {name:22s} {cells}", flush=True)
    checked = sum(1 for n in names if (ctx.jax is not None and hasattr(kernels.load(n), "jax_kernel"))
                  or (ctx.torch is not None and n in ctx.torch_kernels))
    print(f"\n{len(names)} kernels, {checked} with a JAX or torch twin checked at {ctx.size} size: "
          f"{'all agree' if not failures else f'{failures} FAILED'}")
    return 1 if failures else 0


def main(argv=None):
    """Run the benchmark (or ``--check``) with command-line arguments ``argv``; return the exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    ns = parse_args(argv)
    try:
        names = _select_kernels(ns.kernels)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    size = ns.size or ("test" if ns.check else "bench")
    budget = ns.budget if ns.budget is not None else (2.0 if ns.quick or size == "test" else 8.0)
    if ns.one_cpu:
        if not hasattr(os, "sched_setaffinity"):
            print("error: --one-cpu needs os.sched_setaffinity (Linux)", file=sys.stderr)
            return 2
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
        try:                      # the native backend's parallel loops: one thread on one CPU
            import numba
            numba.set_num_threads(1)
        except ImportError:
            pass
    cold_dir = None
    if ns.cold_cache:
        cold_dir = tempfile.mkdtemp(prefix="flowgrad-bench-cache-")
        os.environ["FLOWGRAD_CACHE_DIR"] = cold_dir
    try:
        return _run(ns, names, size, budget, argv)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        if cold_dir:
            shutil.rmtree(cold_dir, ignore_errors=True)


def _run(ns, names, size, budget, argv):
    backends, unavailable = _select_backends(ns.backends)
    jax = None if ns.no_jax else import_jax()
    torch, torch_kernels = (None, {}) if ns.no_torch else import_torch()
    if torch is not None and ns.one_cpu:
        # PyTorch's own pool would keep threads waiting on the one CPU after each of its calls,
        # taking it from the calls timed after them
        torch.set_num_threads(1)
    ctx = Context(size, budget, ns.repeat, ns.quick, backends, jax, torch, torch_kernels)
    if not backends:
        print("no flowgrad backend is available")
        return 1
    if ns.check:
        return run_check(names, ctx)

    out_dir = Path(ns.out) if ns.out else SCRATCH
    json_path = out_dir / "results" / "results.json" if ns.out else SCRATCH / "results.json"
    md_path = out_dir / "RESULTS.md"
    command = "python -m benchmarks.run " + " ".join(argv)
    results = {
        "command": command.strip(), "size": size, "budget_s_per_kernel": budget, "repeat": ns.repeat,
        "rounds": ROUNDS,
        "quick": ns.quick, "backends": backends, "unavailable_backends": unavailable,
        "jax": jax is not None, "torch": torch is not None,
        "machine": machine_info(torch), "bench_grad_tol": BENCH_GRAD_TOL,
        "json_path": _display_path(json_path),
        "compile_cache": ("cold: a new empty FLOWGRAD_CACHE_DIR for this run" if ns.cold_cache else
                          "as configured (FLOWGRAD_CACHE_DIR=%s): code compiled by an earlier run may be "
                          "reused" % os.environ.get("FLOWGRAD_CACHE_DIR", "unset, the default")),
        "kernel_names": names, "kernels": {},
    }
    print(report.header_line(results))
    started = time.perf_counter()
    for i, name in enumerate(names, 1):
        entry = bench_kernel(name, ctx)
        results["kernels"][name] = entry
        print(f"[{i:2d}/{len(names)}] " + report.progress_line(name, entry, backends), flush=True)
        _write_json(json_path, results)          # after every kernel: a crash keeps what was measured
    results["total_wall_s"] = time.perf_counter() - started
    results["machine"]["loadavg_1min_end"] = _loadavg()

    print()
    print(report.screen_table(results))
    _write_json(json_path, results)
    md_path.parent.mkdir(parents=True, exist_ok=True)
    md_path.write_text(report.markdown(results))
    print(f"\nwrote {_display_path(md_path)} and {_display_path(json_path)} "
          f"({results['total_wall_s']:.0f} s)")
    failed = [n for n, e in results["kernels"].items() if e["errors"]]
    if failed:
        print(f"errors in {len(failed)} kernel(s): {', '.join(failed)}")
    return 1 if failed else 0


def _write_json(path, results):
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(results, indent=1) + "\n")
    os.replace(tmp, path)


def _display_path(path):
    path = Path(path).resolve()
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


if __name__ == "__main__":
    sys.exit(main())
