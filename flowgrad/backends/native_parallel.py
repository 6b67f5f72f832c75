"""Which loop nests of the native backend run their outer loop over threads (a ``prange``).

``ParallelNests`` is a part of ``native.Lowering``: ``parallel_mode`` reads
``FLOWGRAD_PARALLEL`` once per generated function, and ``splits`` decides for each nest, from
its safety, its static size and the work each thread would get (see ``splits``).
"""
from __future__ import annotations

import os

import numpy as np

from ..ir.core import Call, Op, Read, Take, const_value, iter_reads, same_ref, walk
from ..ir.elements import ELEMENTS
from .native_deps import _reads_off
from .native_runtime import threads


class ParallelNests:
    """The thread decisions of a ``Lowering`` (which sets ``self.threads`` from ``parallel_mode``)."""

    PARALLEL_MIN = 1 << 15      # elements a nest needs before its outer loop is split over threads
    # Work is counted in element operations: per element of a nest, one per array it reads or
    # writes and the flops of its expressions (see ``splits``).
    WORK_PER_THREAD = 1 << 21            # 0.1-1 ms of one thread's time (cheap arithmetic to transcendentals)
    LIBRARY_WORK_PER_THREAD = 1 << 22    # in a function that also calls BLAS, LAPACK or other libraries
    # calls lowered to loops of their own; any other (a matrix product, a solve, a convolution) calls a library
    LOOP_CALLS = frozenset({
        "check_index", "check_sizes", "trip_count", "ckpt_slots", "ckpt_schedule", "ckpt_segment", "ckpt_rows",
        "sum", "prod", "max", "max_const", "min", "argmax", "argmin", "reshape", "cumsum", "triu", "tril", "eye",
        "arange", "argsort", "searchsorted", "gather", "gather_last", "add_at", "scatter", "mask_gather", "mask_scatter",
        "mask_add", "sum_to", "bincount"})

    def parallel_mode(self, body):
        """``FLOWGRAD_PARALLEL``: "0" -> "off", "1" -> "on" (every safe nest of ``PARALLEL_MIN``
        elements), else the work per thread a nest of a function with ``body`` needs to be split:
        more where it calls a library, whose worker threads spin after each call and compete with
        the nest's for the CPUs."""
        flag = os.environ.get("FLOWGRAD_PARALLEL", "")
        if flag == "0":
            return "off"
        if flag == "1":
            return "on"
        library = any(isinstance(s, Call) and s.op not in self.LOOP_CALLS for s in walk(body))
        return self.LIBRARY_WORK_PER_THREAD if library else self.WORK_PER_THREAD

    @staticmethod
    def work(sizes, pairs):
        """Element operations of a nest over ``sizes`` assigning ``pairs``: per element, one per
        array read or written and the flops of the expressions."""
        def cost(e):
            if isinstance(e, Read):
                return 1 if e.ref.container.ndim else 0      # a scalar stays in a register
            if isinstance(e, Op):
                flops = getattr(ELEMENTS.get(e.name), "flops", None) or 1
                return flops + sum(cost(a) for a in e.args)
            if isinstance(e, Take):
                return 2 + sum(cost(i) for i in e.index)
            return 0
        per_element = sum((dst is not None) + (cost(e) if e is not None else 0) for dst, e in pairs)
        return int(np.prod(sizes)) * max(per_element, 1)

    def splits(self, shape, pairs=()):
        """Whether a nest over ``shape`` assigning ``pairs`` (``(destination, expression)``)
        may run its outer loop over threads. It may when it is safe (below), its shape is known
        when the function is generated, it has two axes or more (a 1-D loop split into chunks does
        not vectorise and ran 3x slower), and, by default, when it is worth it: each thread's share
        of the nest's work (elements x (arrays read and written + flops per element), see
        ``work``) at least ``WORK_PER_THREAD`` (``LIBRARY_WORK_PER_THREAD`` in a function
        that calls BLAS, LAPACK or other libraries), and at least one outer iteration per thread,
        for ``native_runtime.threads()`` threads (one: nothing is split; more: more work
        per nest). A parallel region costs waking the threads and a barrier, and a thread that
        another process or a spinning BLAS worker keeps off its CPU holds the barrier up: on the
        2-CPU machine measured, busy (load 9-10), nests of 40-100 us per thread in the time loops
        of jacobi_2d, heat_3d and nonlinear_diffusion_2d's gradient ran 8-130% slower on two
        threads than on one (``benchmarks/threads.md``, with the OpenMP threads waiting asleep:
        ``native_runtime``).
        ``FLOWGRAD_PARALLEL=0`` splits none; ``FLOWGRAD_PARALLEL=1`` every safe one of at least
        ``PARALLEL_MIN`` elements. Measured with Numba's ``prange`` on the outer loop of a 2-D
        stencil: 1.75x on two threads, on par on one. Safe when every
        iteration writes its own elements (each destination is a view: distinct positions,
        distinct elements) and reads nothing another iteration writes: a written container is
        read only at the element being written. Reductions never join a split nest (their
        accumulator would be shared), nor do reads ahead of an in-place write."""
        sizes = [const_value(d) for d in shape]
        if self.threads == "off" or len(sizes) < 2 or None in sizes or sizes[0] < 2 or \
                int(np.prod(sizes)) < self.PARALLEL_MIN:
            return False
        if self.threads != "on":
            team = threads()
            if team < 2 or sizes[0] < team or self.work(sizes, pairs) < self.threads * team:
                return False
        for dst, _ in pairs:
            if dst is None:           # a push, or a reduction: it writes none of the views
                continue
            for other, e in pairs:
                index_reads = [r for ie in (other.index_exprs() if other is not None else ()) for r in iter_reads(ie)]
                if (e is not None and _reads_off(e, dst)) or any(
                        r.ref.container is dst.container and not same_ref(r.ref, dst) for r in index_reads):
                    return False
                if other is not None and other is not dst and other.container is dst.container and \
                        not same_ref(other, dst):
                    return False
        return True


__all__ = ["ParallelNests"]
