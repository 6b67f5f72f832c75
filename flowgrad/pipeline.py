"""The route from a captured program to code, declared as data.

Each mode's passes are a list of ``Step``s run in order by ``run``. A step works on one or more
*sweeps* of a ``Unit`` (``body`` for a forward or tangent program; ``forward`` and ``backward``
for a gradient program) with one signature, ``fn(stmts, unit) -> stmts`` (a ``joint`` step sees
all its sweeps at once: ``fn([stmts, ...], unit) -> [stmts, ...]``). A step's name is the module
its pass lives in, so ``FLOWGRAD_DUMP=<name>`` (a comma-separated list) prints the statements
before and after every step of that module; ``FLOWGRAD_DUMP=1`` prints each new capture's IR.

    CAPTURED  every mode, on the captured body: refuse complex calls without rules, size checks,
              fusion of temporaries, dead code, solves by Cholesky factors made triangular, late
              gathers, softmax shifts as constants, loops of products summed by matrix products,
              independent column loops interchanged (row loops made statements over all their
              rows), loops' matrix products taken out of them (triangular ones and their row
              updates in blocks), copies read from their originals and dead code again, products
              read transposed (from another one, a Gram matrix's columns as its rows), arrays
              swept along their last axis stored with it first (native)
    FORWARD   the forward program (jit): calls standing for statements expanded (a fixed point's
              iteration), hoisted factorisations, native gathers and packing, view bounds
    REVERSE   the gradient program built by ``autodiff.reverse``: expand such calls, run a reversed
              loop's passes that test their variable apart from the rest, simplify the
              backward sweep (its full sums taken once per product they share), keep in the
              forward sweep what it needs, hoist and share factorisations, save the parts a loop
              overwrites in one tape entry, order independent loops, then the native and bounds
              steps over both sweeps
    TANGENT   the tangent program built by ``autodiff.forward`` (and ``autodiff.batch``), such calls
              expanded first
"""
from __future__ import annotations

import os

from .autodiff.reverse import KEPT_OUTPUTS
from .ir.core import Pop, Push, walk
from .ir.printer import block_lines
from .ir.verify import verify
from .passes.bounds import hoist_view_bounds
from .passes.bulk import bulk_tape_traffic
from .passes.checks import insert_size_checks
from .passes.cleared import assign_cleared_sums
from .passes.complex_calls import refuse_complex_calls
from .passes.contract import contract_product_loops
from .passes.copies import propagate_copies
from .passes.dce import eliminate_dead
from .passes.expand import expand_calls
from .passes.fuse import fuse_temporaries, split_kept
from .passes.gather import gather_shifted_sums
from .passes.hoist import factor_repeated_solves, hoist_factorizations, share_factorizations
from .passes.lift_products import lift_loop_products
from .passes.late import gather_after_products
from .passes.layout import permute_swept_arrays
from .passes.order import fold_into_row_loops, forward_independent_loops, interchange_forward_loops
from .passes.outer import defer_outer_products
from .passes.pack import pack_strided_views
from .passes.peel import peel_boundary_tests
from .passes.shifts import constant_shifts
from .passes.sums import share_sum_products
from .passes.take import fuse_gathers
from .passes.transposes import read_gram_rows, share_transposed_products
from .passes.triangular import triangular_solves


class Unit:
    """What the steps of one compilation share.

    Attributes:
      sweeps: sweep name -> its statements (replaced by each step).
      containers, namer: the program's containers and name generator (steps add to both).
      outputs: the containers the program delivers (kept alive, never fused away).
      backend: ``"numpy"`` or ``"native"``; mode: the transform's mode.
      kept: ops whose outputs the gradient reads (split out of fused expressions).
      live: what the backward sweep reads of the forward sweep (found by its dead-code step).
      forward_containers: for a gradient program, the containers its forward sweep makes
        (steps with ``forward_made`` add theirs).
    """

    def __init__(self, sweeps, containers, namer, outputs, backend, mode, forward_containers=None):
        self.sweeps = dict(sweeps)
        self.containers, self.namer = containers, namer
        self.outputs = list(outputs)
        self.backend, self.mode = backend, mode
        self.kept = KEPT_OUTPUTS if mode != "forward" else frozenset()
        self.live = set()
        self.forward_containers = forward_containers


class Step:
    """One pass: ``name`` (its module), the ``sweeps`` it runs on, ``fn``, and ``when(unit)``
    deciding whether it runs (a backend, a mode). ``forward_made``: containers the step makes
    belong to the forward sweep."""

    def __init__(self, name, sweeps, fn, when=None, joint=False, forward_made=False):
        self.name, self.fn, self.when, self.joint, self.forward_made = name, fn, when, joint, forward_made
        self.sweeps = (sweeps,) if isinstance(sweeps, str) else tuple(sweeps)


def native(unit):
    return unit.backend == "native"


def _backward_dce(stmts, unit):
    out, live = eliminate_dead(stmts, set(unit.outputs))
    unit.live |= live
    return out


CAPTURED = [
    Step("complex_calls", "body", lambda b, u: refuse_complex_calls(b)),
    Step("checks", "body", lambda b, u: insert_size_checks(b, u.containers, u.namer)),
    Step("fuse", "body", lambda b, u: split_kept(b, u.kept, u.containers, u.namer)),
    Step("fuse", "body", lambda b, u: fuse_temporaries(b, protected=u.outputs, kept_ops=u.kept)),
    Step("dce", "body", lambda b, u: eliminate_dead(b, set(u.outputs))[0]),
    Step("triangular", "body", lambda b, u: triangular_solves(b)),
    Step("late", "body", lambda b, u: gather_after_products(b, u.containers, u.namer)),
    Step("shifts", "body", lambda b, u: constant_shifts(b)),
    Step("contract", "body", lambda b, u: contract_product_loops(b, u.containers, u.namer)),
    Step("order", "body", lambda b, u: interchange_forward_loops(b, set(u.outputs), u.containers, u.namer)),
    Step("lift_products", "body", lambda b, u: lift_loop_products(b, u.containers, u.namer, u.outputs)),
    Step("order", "body", lambda b, u: interchange_forward_loops(b, set(u.outputs), u.containers, u.namer)),
    Step("copies", "body", lambda b, u: propagate_copies(b, set(u.outputs), calls=False)),
    Step("dce", "body", lambda b, u: eliminate_dead(b, set(u.outputs))[0]),     # fills the rows overwrite, copies
    Step("transposes", "body", lambda b, u: share_transposed_products(b)),
    Step("transposes", "body", lambda b, u: read_gram_rows(b)),
    Step("layout", "body", lambda b, u: permute_swept_arrays(b, u.containers, u.namer, u.outputs), when=native),
]

FORWARD = [
    Step("expand", "body", lambda b, u: expand_calls(b)),
    Step("hoist", "body", lambda b, u: hoist_factorizations(b, u.containers, u.namer)),
    Step("take", "body", lambda b, u: fuse_gathers(b)[0], when=native),
    Step("pack", "body", lambda b, u: pack_strided_views(b, u.containers, u.namer), when=native),
    Step("bounds", "body", lambda b, u: hoist_view_bounds(b, u.containers, u.namer)),
]

REVERSE = [
    Step("expand", ("forward", "backward"), lambda b, u: expand_calls(b)),
    Step("peel", "backward", lambda b, u: peel_boundary_tests(b)),
    Step("gather", "backward", lambda b, u: gather_shifted_sums(b)),
    Step("copies", "backward", lambda b, u: propagate_copies(b, set(u.outputs))),
    Step("dce", "backward", _backward_dce),
    Step("fuse", "backward", lambda b, u: fuse_temporaries(b, protected=set(u.outputs))),
    Step("cleared", "backward", lambda b, u: assign_cleared_sums(b)),
    Step("sums", "backward", lambda b, u: share_sum_products(b, u.containers, u.namer)),
    Step("outer", "backward", lambda b, u: defer_outer_products(b, u.containers, u.namer)),
    Step("dce", "forward", lambda b, u: eliminate_dead(b, u.live)[0]),
    Step("hoist", "forward", lambda b, u: factor_repeated_solves(b, u.sweeps["backward"], u.containers, u.namer),
         forward_made=True),
    Step("hoist", "backward", lambda b, u: factor_repeated_solves(b, u.sweeps["forward"], u.containers, u.namer)),
    Step("hoist", "forward", lambda b, u: hoist_factorizations(b, u.containers, u.namer), forward_made=True),
    Step("hoist", "backward", lambda b, u: hoist_factorizations(b, u.containers, u.namer)),
    Step("hoist", "backward", lambda b, u: share_factorizations(u.sweeps["forward"], b)),
    Step("bulk", ("forward", "backward"), lambda bs, u: bulk_tape_traffic(*bs), joint=True),
    Step("order", "backward", lambda b, u: forward_independent_loops(b, set(u.outputs), u.containers, u.namer)),
    Step("order", "backward", lambda b, u: fold_into_row_loops(b, set(u.outputs), u.containers, u.namer),
         when=native),
    Step("take", ("forward", "backward"), lambda bs, u: list(fuse_gathers(*bs)), when=native, joint=True),
    Step("pack", ("forward", "backward"), lambda b, u: pack_strided_views(b, u.containers, u.namer),
         when=native),
    Step("bounds", ("forward", "backward"), lambda b, u: hoist_view_bounds(b, u.containers, u.namer),
         forward_made=True),
]

TANGENT = [
    Step("expand", "body", lambda b, u: expand_calls(b)),
    Step("dce", "body", lambda b, u: eliminate_dead(b, set(u.outputs))[0]),
    # a gradient program's (forward over reverse) temporaries stay as the reverse sweep made them
    Step("fuse", "body", lambda b, u: fuse_temporaries(b, protected=u.outputs),
         when=lambda u: not any(isinstance(s, (Push, Pop)) for s in walk(u.sweeps["body"]))),
    Step("hoist", "body", lambda b, u: hoist_factorizations(b, u.containers, u.namer)),
    Step("take", "body", lambda b, u: fuse_gathers(b)[0], when=native),
    Step("pack", "body", lambda b, u: pack_strided_views(b, u.containers, u.namer), when=native),
    Step("bounds", "body", lambda b, u: hoist_view_bounds(b, u.containers, u.namer)),
]


def run(steps, unit):
    """Run ``steps`` in order on ``unit``, verifying the statements after each one."""
    dump = os.environ.get("FLOWGRAD_DUMP", "").split(",")
    for step in steps:
        if step.when is not None and not step.when(unit):
            continue
        before = set(unit.containers)
        old = [unit.sweeps[s] for s in step.sweeps]
        new = step.fn(old, unit) if step.joint else [step.fn(stmts, unit) for stmts in old]
        for sweep, stmts in zip(step.sweeps, new):
            unit.sweeps[sweep] = stmts
        verify([s for stmts in new for s in stmts], unit.containers)
        if step.forward_made and unit.forward_containers is not None:
            unit.forward_containers += [c for n, c in unit.containers.items() if n not in before]
        if step.name in dump:
            for sweep, a, b in zip(step.sweeps, old, new):
                print(f"# before {step.name} ({sweep})\n" + "\n".join(block_lines(a, "  ")))
                print(f"# after {step.name} ({sweep})\n" + "\n".join(block_lines(b, "  ")))
    return unit


__all__ = ["Unit", "Step", "CAPTURED", "FORWARD", "REVERSE", "TANGENT", "run"]
