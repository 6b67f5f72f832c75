"""Reverse mode on the IR: activity analysis, the adjoint program, and value restoration.

The backward sweep walks the forward program in reverse. Before a statement's adjoint runs,
every value that statement overwrote is restored from a tape (pushed just before the
forward write), so the adjoint always sees the memory exactly as the forward statement saw
it: overwrites, in-place updates, aliasing views, loop counters and branch conditions are
all handled by the one mechanism. Only containers the backward sweep actually reads are
restored (the "needed" set), so e.g. a linear stencil differentiated w.r.t. its initial
state stores no tape at all.
"""
from __future__ import annotations

import numpy as np

from ..errors import UnsupportedError
from ..ir.core import (I64, Assign, Call, Const, Container, For, If, Index, NewAxis, Op, Pop, Program,
                       Push, Read, Ref, Slice, While, apart, broadcast_shapes, child_blocks, const_value, data_reads,
                       difference, distinct, is_inexact, iter_reads, loop_range, map_blocks, op, same_expr, same_ref,
                       scalar, stmt_reads, stmt_writes, touches, walk)
from ..checkpoint import loops as loop_ckpt
from ..ir.elements import ELEMENTS
from ..checkpoint.schedules import STORE_ALL
from .replays import previous_pass_restores, replay_definitions
from .restores import read_in_pass, unobserved
from .rules import CALLS, PARTIALS, ZERO_DERIVATIVE, expand_formulas


# ---------------------------------------------------------------- activity


def activity(prog: Program, wrt, result) -> set:
    """Containers that depend on ``wrt`` and influence ``result`` (the critical subgraph)."""
    stmts = [s for s in walk(prog.body) if isinstance(s, (Assign, Call, Push, Pop))]

    def flows(s):
        """(targets, sources) of derivative flow for one statement (a gradient program's tapes carry
        values too: a push from its view into the tape, a pop back)."""
        if isinstance(s, Push):
            return {s.tape}, {s.ref.container}
        if isinstance(s, Pop):
            return {s.ref.container}, {s.tape}
        if isinstance(s, Assign):
            srcs = {r.ref.container for r in data_reads(s.expr)}
            if s.accumulate:
                srcs.add(s.dst.container)
            return {s.dst.container}, srcs
        srcs = {r.ref.container for e in s.inputs for r in data_reads(e)}
        if CALLS[s.op].inplace:
            srcs.add(s.outputs[0])
        return set(s.outputs), srcs

    edges = [flows(s) for s in stmts]
    varied = set(wrt)
    changed = True
    while changed:
        changed = False
        for dsts, srcs in edges:
            if srcs & varied:
                for d in dsts:
                    if d not in varied and is_inexact(d.dtype):
                        varied.add(d)
                        changed = True
    useful = {result}
    changed = True
    while changed:
        changed = False
        for dsts, srcs in edges:
            if dsts & useful:
                for c in srcs - useful:
                    useful.add(c)
                    changed = True
    return {c for c in varied & useful if is_inexact(c.dtype)}


# ---------------------------------------------------------------- the builder


class _Restore:
    """A placeholder for restoring what one forward statement overwrote."""

    def __init__(self, stmt, ref):
        self.stmt, self.ref = stmt, ref


class ReverseBuilder:
    def __init__(self, prog: Program, wrt, result: Container, namer):
        self.prog, self.result, self.namer = prog, result, namer
        self.active_set = activity(prog, wrt, result)
        self.grads = {}
        self.tape_grads = {}     # a tape of the program (reverse over a gradient program) -> its adjoint tape
        for c in sorted(self.active_set, key=lambda c: c.name):
            if c.kind == "tape":
                self.tape_grads[c] = Container(namer("g_" + c.name), c.dtype, (), "tape")
            else:
                self.grads[c] = Container(namer("g_" + c.name), c.dtype, c.shape, "transient")
        self.temps = []
        self.counters = {}       # While -> trip counter container
        self.restores = []       # every _Restore placeholder, forward program order
        self.loop_depth = {}

    # --- services for the rules (the ``ctx`` of ``CallRule.vjp``) ---

    def temp(self, shape, dtype, hint="t"):
        c = Container(self.namer(hint), dtype, shape, "transient")
        self.temps.append(c)
        return c

    def active(self, e):
        """Whether an operand carries derivative (reads an active container)."""
        return self.is_active_expr(e)

    def grad_ref(self, e):
        if not isinstance(e, Read) or e.ref.container not in self.grads:
            return None
        g = self.grads[e.ref.container]
        if g.ndim == 0:             # a scalar, also one read broadcast (``s[None]``): its adjoint sums
            return Ref(g, ())
        return e.ref.with_container(g)

    def accumulate(self, x, contrib, space=None):
        """``adjoint(x) += contrib``, where ``contrib`` lives in the (broadcast) iteration ``space``
        of the expression that read ``x``: axes ``x`` was broadcast along are summed."""
        space = broadcast_shapes(contrib.shape, x.shape) if space is None else space
        if isinstance(x, Op):
            return self.propagate(x, contrib, space)
        gref = self.grad_ref(x)
        if gref is None:
            return []
        contrib = _real_part(contrib, gref.dtype)
        if _needs_unbroadcast(space, gref.shape):
            t = self.temp(gref.shape, gref.dtype, "gsum")
            return [Call("sum_to", [contrib], [t], {"shape": gref.shape, "full": space}),
                    Assign(gref, Read(Ref(t)), accumulate=True)]
        return [Assign(gref, contrib, accumulate=True)]

    def via_temp(self, x, opname, inputs, attrs=None, scale=None, shape=None):
        """Compute an operand's adjoint contribution with a Call into a temporary (of ``shape``,
        default the operand's; a broadcast result is summed back), then add it."""
        if self.grad_ref(x) is None and not isinstance(x, Op):
            return []
        dtype = x.dtype if is_inexact(x.dtype) else np.float64
        if any(e.dtype.kind == "c" for e in inputs):      # a real operand's complex contribution: its real part
            dtype = np.result_type(dtype, np.complex64)    # is added (``accumulate``)
        t = self.temp(x.shape if shape is None else shape, dtype, "g" + opname[:4])
        contrib = Read(Ref(t)) if scale is None else Read(Ref(t)) * scale
        return [Call(opname, inputs, [t], attrs or {})] + self.accumulate(x, contrib)

    # --- adjoints of expressions and statements ---

    def is_active_expr(self, e):
        return any(r.ref.container in self.grads for r in data_reads(e))

    def propagate(self, e, g, space=None, out=None):
        """Statements adding ``g`` (the adjoint of expression ``e``, living in the broadcast
        iteration ``space``) into the adjoints of its reads. Contributions to the same view
        (``u * u``, a stencil reading one slice twice) are summed into one accumulation."""
        leaves = []
        stmts = self._propagate(e, g, space, leaves, out)
        groups = []
        for x, contrib, sp in leaves:
            for grp in groups:
                if same_ref(grp[0].ref, x.ref) and len(grp[2]) == len(sp) and \
                        all(same_expr(a, b) for a, b in zip(grp[2], sp)):
                    grp[1] = grp[1] + contrib
                    break
            else:
                groups.append([x, contrib, sp])
        for x, contrib, sp in groups:
            stmts += self.accumulate(x, contrib, sp)
        return stmts

    def _propagate(self, e, g, space, leaves, out=None, guard=None):
        """``out``: where ``e``'s value can be read instead of evaluating ``e`` again.

        ``guard``: under a branch of ``np.where``, the condition for that branch. Its adjoint is
        not masked where the branch is not taken, but what reaches each read is: so that
        ``np.where(x > 0, np.sqrt(x), 0)`` has gradient 0, not 0 * inf = NaN, at x <= 0."""
        if isinstance(e, Const) or not self.is_active_expr(e):
            return []
        g = _real_part(g, e.dtype)
        space = broadcast_shapes(g.shape, e.shape) if space is None else space
        if isinstance(e, Read):
            if self.grad_ref(e) is not None:
                leaves.append((e, g if guard is None else op("where", guard, g, 0.0), space))
            return []
        if e.name in ZERO_DERIVATIVE:
            return []
        stmts = []
        live = [a for a in e.args if self.is_active_expr(a)]
        if len(live) > 1 and not _cheap(g):
            t = self.temp(g.shape, e.dtype, "gexpr")
            stmts.append(Assign(Ref(t), g))
            g = Read(Ref(t))
        if e.name == "where":
            # a branch whose derivatives stay finite takes the masked adjoint, as the rule says;
            # one that may divide by zero or overflow where it is not taken is masked at its reads
            c = e.args[0]
            partials, guards = [None], [None]
            for a, taken, masked in ((e.args[1], c, op("where", c, g, 0.0)),
                                     (e.args[2], op("logical_not", c), op("where", c, 0.0, g))):
                if _finite_partials(a):
                    partials.append(masked)
                    guards.append(guard)
                else:
                    partials.append(g)
                    guards.append(taken if guard is None else op("logical_and", guard, taken))
        else:
            if e.name not in PARTIALS:
                raise UnsupportedError(f"unsupported differentiation of {e.name}: it has no derivative rule; "
                                       "compute it outside the differentiated function")
            partials = PARTIALS[e.name](g, e if out is None else out, *e.args)
            guards = [guard] * len(e.args)
        for a, p, gd in zip(e.args, partials, guards):
            if p is None or not self.is_active_expr(a):
                continue
            if not isinstance(a, Read) and _needs_unbroadcast(space, a.shape):
                t = self.temp(a.shape, a.dtype, "gsum")
                p = _real_part(p if gd is None else op("where", gd, p, 0.0), a.dtype)
                stmts.append(Call("sum_to", [p], [t], {"shape": a.shape, "full": space}))
                stmts += self._propagate(a, Read(Ref(t)), a.shape, leaves)
            else:
                stmts += self._propagate(a, p, space, leaves, guard=gd)
        return stmts

    @staticmethod
    def reads_output(s: Assign):
        """Whether the adjoint of ``s`` reads the value ``s`` wrote (so it runs before that value
        is restored): ``x = tanh(e)``, ``exp``, ``expm1``, ``sqrt``, whose derivatives are cheap
        in their result, where evaluating ``e``'s transcendental again costs as much as the
        forward did, and keeping ``e`` for it takes a tape of its own."""
        return isinstance(s.expr, Op) and s.expr.name in OUTPUT_PARTIALS and not s.accumulate and \
            not any(r.ref.container is s.dst.container for r in iter_reads(s.expr))

    def adjoint_assign(self, s: Assign):
        x = s.dst.container
        if x not in self.grads:
            return []
        gdst = s.dst.with_container(self.grads[x])
        reads_self = any(r.ref.container is x for r in data_reads(s.expr))
        if s.accumulate:
            if reads_self:
                t = self.temp(s.dst.shape, x.dtype, "gacc")
                return [Assign(Ref(t), Read(gdst))] + self.propagate(s.expr, Read(Ref(t)))
            return self.propagate(s.expr, Read(gdst))
        clear = Assign(gdst, Const(0.0))
        if reads_self:
            t = self.temp(s.dst.shape, x.dtype, "gold")
            return [Assign(Ref(t), Read(gdst)), clear] + self.propagate(s.expr, Read(Ref(t)))
        out = Read(s.dst) if self.reads_output(s) else None
        return self.propagate(s.expr, Read(gdst), out=out) + [clear]

    def adjoint_call(self, s: Call):
        rule = CALLS[s.op]
        outs = [c for c in s.outputs if c in self.grads]
        if not outs:
            return []
        if not rule.inplace and not any(self.is_active_expr(e) for e in s.inputs):
            # a value made from nothing active (``C = np.eye(n)``, later written with active
            # values): no derivative flows through the call, its outputs' adjoints just end here
            return [Assign(Ref(self.grads[c]), Const(0.0)) for c in outs]
        if rule.vjp is None and rule.adjoint_of:
            raise UnsupportedError(f"{s.loc}: unsupported reverse mode over the adjoint of {rule.adjoint_of} "
                                   f"({s.op}, in the gradient program being differentiated): take this second "
                                   "derivative forward over reverse (flowgrad.hvp, flowgrad.hessian, or jvp of "
                                   "grad(f))")
        if rule.vjp is None:
            raise UnsupportedError(f"{s.loc}: unsupported differentiation of {s.op}: no adjoint rule; "
                                   "compute it outside the differentiated function")
        gouts = [self.grads.get(c) for c in s.outputs]
        stmts = rule.vjp(self, s, gouts)
        if not rule.inplace:
            stmts += [Assign(Ref(g), Const(0.0)) for g in gouts if g is not None]
        return stmts

    def adjoint_push(self, s: Push):
        """A push saved a view on a tape; the adjoint of that entry comes off the adjoint tape (the
        adjoint of the pop that read the entry back pushed it there) into the view's adjoint."""
        gt = self.tape_grads.get(s.tape)
        if gt is None:
            return []
        t = self.temp(s.ref.shape, s.tape.dtype, "gtape")
        whole = Ref(t)
        stmts = [Pop(gt, whole, s.loc)]
        g = self.grads.get(s.ref.container)
        if g is not None:
            stmts.append(Assign(s.ref.with_container(g), Read(whole), accumulate=True))
        return stmts

    def adjoint_pop(self, s: Pop):
        """A pop overwrote a view with a tape's entry: the view's adjoint goes onto the adjoint tape
        (a stack, so the pushes' adjoints take the entries in the order they need) and is cleared."""
        gt = self.tape_grads.get(s.tape)
        g = self.grads.get(s.ref.container)
        gref = s.ref.with_container(g) if g is not None else None
        if gt is None:
            return [] if gref is None else [Assign(gref, Const(0.0))]
        # the entry is pushed from a whole array of its own, as the push's adjoint pops it (where its
        # size is known only at run time, the native tape keeps the size with a whole array's entry)
        t = self.temp(s.ref.shape, s.tape.dtype, "gpush")
        whole = Ref(t)
        if gref is None:                # nothing downstream of the popped value is active: a zero entry
            return [Assign(whole, Const(0.0)), Push(gt, whole, s.loc)]
        return [Assign(whole, Read(gref)), Push(gt, whole, s.loc), Assign(gref, Const(0.0))]

    def reverse_block(self, stmts, depth):
        out = []
        for s in reversed(stmts):
            out += self.reverse_stmt(s, depth)
        return out

    def _restore(self, s, ref, depth):
        r = _Restore(s, ref)
        self.restores.append(r)
        self.loop_depth[id(r)] = depth
        return r

    def reverse_stmt(self, s, depth):
        if isinstance(s, Assign):
            if self.reads_output(s):
                return self.adjoint_assign(s) + [self._restore(s, s.dst, depth)]
            return [self._restore(s, s.dst, depth)] + self.adjoint_assign(s)
        if isinstance(s, Call):
            restores = [self._restore(s, Ref(c), depth) for c in s.outputs]
            if CALLS[s.op].inplace:
                # An in-place Call (``np.add.at(x, i, sin(x[:2]))``, ``y[idx] = f(y)``) read its
                # output, and its inputs may read it too: like an Assign, its adjoint sees the
                # memory as the call saw it. No in-place adjoint reads the value the call wrote.
                return restores + self.adjoint_call(s)
            # Any other Call writes whole fresh outputs its inputs cannot read, so its adjoint
            # (which may read the outputs, e.g. max or solve) runs before they are restored.
            return self.adjoint_call(s) + restores
        if isinstance(s, Push):
            return self.adjoint_push(s)
        if isinstance(s, Pop):
            return [self._restore(s, s.ref, depth)] + self.adjoint_pop(s)
        if isinstance(s, For):
            body = self.reverse_block(s.body, depth + 1)
            back = For(s.var, s.start, s.stop, s.step, body, reverse=not s.reverse, loc=s.loc)
            return [back, self._restore(s, Ref(s.var, ()), depth)]
        if isinstance(s, If):
            return [If(s.cond, self.reverse_block(s.then, depth), self.reverse_block(s.orelse, depth), s.loc)]
        if isinstance(s, While):
            cnt = Container(self.namer("trips"), I64, (), "transient")
            self.counters[s] = cnt
            it = Container(self.namer("trip"), I64, (), "transient")
            body = self.reverse_block(s.body, depth + 1)
            # inside another loop, each pass of the while loop counts its own trips: the count of
            # the pass before is restored after this one is reversed (pushed before its reset)
            return [For(it, 0, scalar(cnt), 1, body, reverse=True, loc=s.loc), self._restore(s, Ref(cnt, ()), depth)]
        raise TypeError(f"cannot reverse {s!r}")


# views of the elementwise declarations (``ir.elements``): derivatives cheap in the result, results
# a gradient's forward sweep keeps as arrays of their own, partials finite for finite operands
OUTPUT_PARTIALS = frozenset(n for n, e in ELEMENTS.items() if e.output)
KEPT_OUTPUTS = frozenset(n for n, e in ELEMENTS.items() if e.kept)
_FINITE_PARTIALS = frozenset(n for n, e in ELEMENTS.items() if e.finite)


def _finite_partials(e):
    """Whether every element function in ``e`` has finite partials for finite operands."""
    if isinstance(e, Op):
        return (e.name in _FINITE_PARTIALS or e.name in ZERO_DERIVATIVE) and all(
            _finite_partials(a) for a in e.args)
    return True


def _cheap(e, budget=2):
    """An adjoint expression cheap enough to recompute at each use (no temporary)."""
    if isinstance(e, (Read, Const)):
        return True
    if isinstance(e, Op) and e.name in ("multiply", "negative", "add", "subtract") and budget > 0:
        return all(_cheap(a, budget - 1) for a in e.args)
    return False


def _real_part(g, dtype):
    """The adjoint of a real value from a complex one: its real part. As in JAX, a real value that
    flows into complex arithmetic gets a real gradient (for ``L(x + i y)``: ``dL/dx - i dL/dy``, whose
    real part is the derivative by the real input)."""
    return op("real", g) if g.dtype.kind == "c" and np.dtype(dtype).kind != "c" else g


def _needs_unbroadcast(src, dst):
    if len(src) != len(dst):
        return True
    for a, b in zip(src, dst):
        if isinstance(b, Const) and b.value == 1 and not (isinstance(a, Const) and a.value == 1):
            return True
    return False


# ---------------------------------------------------------------- value restoration


def _needed_restores(prog, backward, replayed, counters=(), inverses=None):
    """The restore placeholders whose values some later backward statement reads.

    Restoring what statement S overwrote is needed only if the backward sweep reads that
    container after S's adjoint, or in a loop that also repeats S's adjoint. (Reading a final
    value, e.g. ``sum(u * u)`` after a stencil loop, needs no tape for the loop's writes.)
    ``replayed`` maps a backward loop variable to forward statements that checkpointing will
    re-execute inside that loop. ``inverses``: restores done by running an update backwards
    (``_inverse``), which read what the update read, where it stands.
    """
    forward = set(prog.containers.values()) | set(counters)      # counters: while loops' trips
    reads, restores = {}, []
    seq = [0]

    paths = {}

    def visit(stmts, loops, path=()):
        for k, st in enumerate(stmts):
            seq[0] += 1
            here = (seq[0], loops)
            if isinstance(st, _Restore):
                restores.append((st, here))
                paths[id(st)] = path + ((stmts, k, None),)
                continue
            for r in stmt_reads(st):
                if r.ref.container in forward:
                    reads.setdefault(r.ref.container, []).append(here)
            if isinstance(st, For):
                # a checkpointed loop re-runs its body from snapshots of what the body writes;
                # what it reads but never writes must hold its value from before the loop
                body = replayed.get(st.var.name, [])
                written = {w.container for t in walk(body) for w in stmt_writes(t)}
                for t in walk(body):
                    for r in stmt_reads(t):
                        if r.ref.container in forward and r.ref.container not in written:
                            reads.setdefault(r.ref.container, []).append((seq[0], loops))
                visit(st.body, loops | {id(st)}, path + ((stmts, k, st),))
            elif isinstance(st, If):
                visit(st.then, loops, path + ((stmts, k, st),))
                visit(st.orelse, loops, path + ((stmts, k, st),))

    visit(backward, frozenset())
    dead = {id(r) for r, _ in restores if _overwritten_before_read(r, paths[id(r)], replayed, inverses)}
    needed = set()
    changed = True
    while changed:
        changed = False
        for r, (at, loops) in restores:
            if id(r) in needed or id(r) in dead:
                continue
            if any(later > at or (ls & loops) for later, ls in reads.get(r.ref.container, ())):
                needed.add(id(r))
                changed = True
                for ie in r.ref.index_exprs():
                    for rd in iter_reads(ie):
                        reads.setdefault(rd.ref.container, []).append((at, loops))
                inverse = (inverses or {}).get(id(r))
                if inverse is not None:
                    for rd in stmt_reads(inverse):
                        reads.setdefault(rd.ref.container, []).append((at, loops))
    return needed


def _inverse(r):
    """The statement that undoes the update ``r`` restores, run where the restore stands (the update
    run backwards: no tape), or None. Updates of a float view by a value not depending on the
    container it writes: ``x[S] += e`` and ``x[S] -= e`` (as sums, or ``x[S] = x[S] + e``), and
    ``x[S] *= c`` or ``x[S] /= c`` by a nonzero constant. Floating point makes the undone value
    differ from the one overwritten by a rounding of the update (``allow_uncompute``)."""
    s = r.stmt
    if not isinstance(s, Assign) or s.dst is not r.ref or s.dst.container.dtype.kind != "f":
        return None
    c = s.dst.container

    def free(e):
        return not any(rd.ref.container is c for rd in iter_reads(e))
    if s.accumulate:
        return Assign(s.dst, op("negative", s.expr), accumulate=True, loc=s.loc) if free(s.expr) else None
    e = s.expr
    if not isinstance(e, Op) or len(e.args) != 2:
        return None
    a, b = e.args
    own = [isinstance(x, Read) and same_ref(x.ref, s.dst) for x in (a, b)]
    if e.name == "add" and own[0] != own[1]:
        other = b if own[0] else a
        return Assign(s.dst, op("subtract", Read(s.dst), other), loc=s.loc) if free(other) else None
    if e.name == "subtract" and own[0] and free(b):
        return Assign(s.dst, op("add", Read(s.dst), b), loc=s.loc)
    k = const_value(b if own[0] else a)
    if e.name == "multiply" and own[0] != own[1] and isinstance(k, float) and k != 0.0:
        return Assign(s.dst, op("divide", Read(s.dst), Const(k)), loc=s.loc)
    if e.name == "divide" and own[0] and isinstance(k, float) and k != 0.0:
        return Assign(s.dst, op("multiply", Read(s.dst), Const(k)), loc=s.loc)
    return None


def _overwritten_before_read(r, path, replayed, inverses=None):
    """Whether, on every way the backward sweep can continue after restore ``r``, the same
    region is restored again before anything reads its container (so ``r`` is not needed). A
    restore that runs an update backwards (``inverses``) reads what the update read."""
    x = r.ref.container
    index_deps = {rd.ref.container for ie in r.ref.index_exprs() for rd in iter_reads(ie)}

    def reads_restored(t, state, ranges):
        # while the restored view's position is unchanged, a read provably apart from it
        # (``x[j]`` for ``j`` in ``range(i)`` against ``x[i]``) does not need its value
        return any(rd.ref.container is x and (state["moved"] or not apart(rd.ref, r.ref, ranges))
                   for rd in stmt_reads(t))

    def scan(seq, state, ranges):
        for st in seq:
            if isinstance(st, _Restore):
                inverse = (inverses or {}).get(id(st))
                if inverse is not None and reads_restored(inverse, state, ranges):
                    return False
                if st.ref.container is x and (st.ref.is_whole() or not state["moved"] and same_ref(st.ref, r.ref)):
                    return True
                if st.ref.container in index_deps:
                    state["moved"] = True
                continue
            for t, inner in _walk_ranges([st], ranges):
                if isinstance(t, _Restore):
                    inverse = (inverses or {}).get(id(t))
                    if inverse is not None and reads_restored(inverse, state, inner):
                        return False
                    if t.ref.container in index_deps:
                        state["moved"] = True
                    continue
                if reads_restored(t, state, inner):
                    return False
                if isinstance(t, For) and t.var.name in replayed:
                    return False
                if any(w.container in index_deps for w in stmt_writes(t)):
                    state["moved"] = True
        return None

    state = {"moved": False}
    # path: (block, position, owner) from the outermost block to the restore's own block
    levels = list(path)
    for depth in range(len(levels) - 1, -1, -1):
        stmts, k, _ = levels[depth]
        ranges = _ranges(level[2] for level in levels[:depth])
        found = scan(stmts[k + 1:], state, ranges)
        if found is not None:
            return found
        owner = levels[depth - 1][2] if depth > 0 else None
        if isinstance(owner, For):
            written = {owner.var} | {w.container for t in walk(owner.body) if not isinstance(t, _Restore)
                                     for w in stmt_writes(t)}
            wrap = dict(state)
            if written & index_deps:
                wrap["moved"] = True
            # the next pass runs the whole body: up to this restore (which, moved, restores
            # another region) and after it, where a Gauss-Seidel sweep reads x[t + 1]
            found = scan(stmts, wrap, ranges)
            if found is False:
                return False
            state["moved"] = state["moved"] or bool(written & index_deps)
    return True


def _ranges(loops, ranges=None):
    """``ranges`` (loop variable -> ``loop_range``) with those of the ``for`` loops in ``loops``."""
    out = dict(ranges or {})
    for s in loops:
        if isinstance(s, For):
            bounds = loop_range(s)
            restored = {t.ref.container for t in walk(s.body) if isinstance(t, _Restore)}
            if bounds is not None and not any(r.ref.container in restored for e in (s.start, s.stop)
                                              for r in iter_reads(e)):
                out[s.var] = bounds
    return out


def _walk_ranges(stmts, ranges):
    """``(statement, loop ranges around it)`` for ``stmts`` and everything nested in them."""
    for s in stmts:
        yield s, ranges
        inner = _ranges([s], ranges)
        for block in child_blocks(s):
            yield from _walk_ranges(block, inner)


def _first_touch(prog):
    """For each container, the first simple statement (program order) that reads or writes it."""
    first = {}
    for s in walk(prog.body):
        touched = [r.ref.container for r in stmt_reads(s)]
        if isinstance(s, Assign):
            touched.append(s.dst.container)
        elif isinstance(s, Call):
            touched += list(s.outputs)
        elif isinstance(s, For):
            touched.append(s.var)
        for c in touched:
            first.setdefault(c, s)
    return first


def _walk_with_backward(stmts, fn):
    """Rebuild a backward block, mapping each _Restore through ``fn`` (None drops it)."""
    out = []
    for s in stmts:
        if isinstance(s, _Restore):
            r = fn(s)
            if r is not None:
                out.append(r)
        elif isinstance(s, For):
            body = _walk_with_backward(s.body, fn)
            if body:
                out.append(For(s.var, s.start, s.stop, s.step, body, s.reverse, s.loc))
        elif isinstance(s, If):
            then, orelse = _walk_with_backward(s.then, fn), _walk_with_backward(s.orelse, fn)
            if then or orelse:
                out.append(If(s.cond, then, orelse, s.loc))
        else:
            out.append(s)
    return out


def _instrument_forward(stmts, pushes, counters):
    """The forward body with Push statements before the writes that must be restored."""
    out = []
    for s in stmts:
        for p in pushes.get(id(s), ()):
            out.append(p)
        if isinstance(s, For):
            out.append(For(s.var, s.start, s.stop, s.step, _instrument_forward(s.body, pushes, counters),
                           s.reverse, s.loc))
        elif isinstance(s, If):
            out.append(If(s.cond, _instrument_forward(s.then, pushes, counters),
                          _instrument_forward(s.orelse, pushes, counters), s.loc))
        elif isinstance(s, While):
            body = _instrument_forward(s.body, pushes, counters)
            cnt = counters.get(s)
            if cnt is not None:
                out.append(Assign(Ref(cnt, ()), Const(0)))
                body.append(Assign(Ref(cnt, ()), Const(1), accumulate=True))
            out.append(While(s.cond, body, s.loc))
        else:
            out.append(s)
    return out


class GradProgram:
    """A forward program instrumented with pushes, its backward sweep, and the adjoint containers."""

    def __init__(self, forward, backward, grads, cotangent, containers, tapes, counters):
        self.counters = counters
        self.forward, self.backward = forward, backward
        self.grads, self.cotangent = grads, cotangent
        self.containers, self.tapes = containers, tapes
        self.uncomputed = []             # (ref, user line) of each value its update run backwards restores


def _record_conditions(stmts, namer, containers):
    """Give every branch a condition the backward sweep can replay: a container assigned just
    before the If and not changed by its branches (the restore mechanism keeps its value)."""
    out = []
    for s in stmts:
        if isinstance(s, If):
            then = _record_conditions(s.then, namer, containers)
            orelse = _record_conditions(s.orelse, namer, containers)
            cond = s.cond
            written = {r.container for t in walk(then + orelse) for r in stmt_writes(t)}
            if not (isinstance(cond, Read) and cond.ref.container.ndim == 0
                    and cond.ref.container not in written):
                c = Container(namer("branch"), cond.dtype, (), "transient")
                containers[c.name] = c
                out.append(Assign(Ref(c, ()), cond, loc=s.loc))
                cond = scalar(c)
            out.append(If(cond, then, orelse, s.loc))
        elif isinstance(s, For):
            out.append(For(s.var, s.start, s.stop, s.step, _record_conditions(s.body, namer, containers),
                           s.reverse, s.loc))
        elif isinstance(s, While):
            out.append(While(s.cond, _record_conditions(s.body, namer, containers), s.loc))
        else:
            out.append(s)
    return out


def build_reverse(prog: Program, wrt, namer, loop_plan=None, uncompute=False) -> GradProgram:
    """The adjoint program of ``prog`` for the scalar or array result ``prog.results[0]``.

    ``loop_plan`` maps a loop's key (``checkpoint.loops.top_loops`` and ``nested_loops``: a
    ``for`` loop's variable name, ``while<k>``) to ``(kind, param)``: a checkpoint schedule kind (see
    ``flowgrad.checkpoint.schedules``; a ``while`` loop's is the online one) and the argument
    container holding its parameter (snapshot interval or count); other loops store every iteration.
    ``uncompute``: restore what an invertible update overwrote by running it backwards instead of
    keeping it on a tape (``_inverse``; not inside a checkpointed loop).
    """
    # each statement once: restores and the pushes they place are keyed by statement identity
    body = expand_formulas(distinct(prog.body), namer, prog.containers)
    prog = Program(prog.name, prog.params, _record_conditions(body, namer, prog.containers), prog.results,
                   prog.containers)
    result = prog.results[0]
    b = ReverseBuilder(prog, wrt, result, namer)
    backward = b.reverse_block(prog.body, 0)
    top, backward = _place_zero_inits(backward, _zero_inits(b, prog), b)
    cotangent = Container(namer("cotangent"), result.dtype, result.shape, "arg")
    if result in b.grads:
        top.append(Assign(Ref(b.grads[result]), Read(Ref(cotangent))))
    backward = _sink_zero_inits(top + backward)
    backward = _merge_part_clears(backward)
    backward = _fold_zero_inits(_rotate_zero_resets(backward, _read_counts(backward)))
    inner = loop_ckpt.nested_loops(prog.body)
    loops = loop_ckpt.top_loops(prog.body) + [(key, loop) for key, loop, _ in inner]
    planned = {key: loop for key, loop in loops if (loop_plan or {}).get(key, (STORE_ALL,))[0] != STORE_ALL}
    nested = {key: outer for key, _, outer in inner}
    replayed = {}               # backward loop variable -> the forward body checkpointing re-runs there
    for loop in planned.values():
        if isinstance(loop, For):
            replayed[loop.var.name] = loop.body
        else:
            back = next(s for s in backward if isinstance(s, For) and isinstance(s.stop, Read)
                        and s.stop.ref.container is b.counters[loop])
            replayed[back.var.name] = loop.body
    inverses = {}
    if uncompute and not replayed:
        inverses = {id(r): inv for r in b.restores for inv in [_inverse(r)] if inv is not None}

    def is_restore(s):
        return isinstance(s, _Restore)

    def needed_in(backward):
        return _needed_restores(prog, backward, replayed, b.counters.values(), inverses) - \
            unobserved(backward, is_restore, replayed, inverses)
    backward = replay_definitions(prog, backward, is_restore, needed_in(backward), inverses)
    copies = {}
    if not replayed:        # a checkpointed loop replays its passes from snapshots
        backward, copies = previous_pass_restores(prog, backward, is_restore, needed_in(backward), namer)
    needed = needed_in(backward)
    first = _first_touch(prog)

    tapes, pushes, uncomputed = {}, dict(copies), []
    params = set(prog.params)        # hold values from before the program, whatever their kind
    # a gradient program's pops hand the memory its pushes kept back to the container, which later
    # writes then change in place: a tape of ours must not share that memory (reverse over reverse)
    shares = not any(isinstance(s, (Push, Pop)) for s in walk(prog.body))

    def keep(r: _Restore):
        c = r.ref.container
        if id(r) not in needed:
            return None
        if c.kind == "transient" and c not in params and b.loop_depth[id(r)] == 0 and first.get(c) is r.stmt:
            return None
        if id(r) in inverses:           # the update run backwards: nothing kept
            uncomputed.append((r.ref, getattr(r.stmt, "loc", None)))
            return inverses[id(r)]
        tape = tapes.get(c)
        if tape is None:
            tape = tapes[c] = Container(namer("tape_" + c.name), c.dtype, (), "tape")
        rebinds = shares and (isinstance(r.stmt, Assign) and not r.stmt.accumulate and r.ref.is_whole()
                              or isinstance(r.stmt, Call) and not CALLS[r.stmt.op].inplace)
        pushes.setdefault(id(r.stmt), []).append(Push(tape, r.ref, getattr(r.stmt, "loc", None),
                                                      copy=not rebinds))
        return Pop(tape, r.ref, getattr(r.stmt, "loc", None))

    backward = _walk_with_backward(backward, keep)
    read_in_pass(backward)
    forward = _instrument_forward(prog.body, pushes, b.counters)
    containers = dict(prog.containers)
    containers[cotangent.name] = cotangent
    # the innermost first: a loop around a checkpointed one records and reverses it as rewritten
    for key, loop in sorted(planned.items(), key=lambda kv: -len(nested.get(kv[0], ()))):
        kind, param = loop_plan[key]
        state = loop_ckpt.state_containers(loop, loop_ckpt.outside(prog.body, loop))
        why = loop_ckpt.checkpointable(loop, state)
        if why is not None:
            raise UnsupportedError(f"{loop.loc}: unsupported checkpointing of this loop: {why}; "
                                   "use strategy='store_all'")
        if key in nested:
            loop_ckpt.apply_nested(forward, backward, loop, kind, param, state, namer, containers, prog.containers)
        elif isinstance(loop, For):
            loop_ckpt.apply(forward, backward, loop, kind, param, state, namer, containers, prog.containers)
        else:
            loop_ckpt.apply_online(forward, backward, loop, b.counters[loop], param, state, namer, containers,
                                   prog.containers)
    for c in list(b.grads.values()) + b.temps + list(tapes.values()) + list(b.counters.values()) + \
            list(b.tape_grads.values()):
        containers[c.name] = c
    for s in walk(backward):
        if isinstance(s, For):
            containers[s.var.name] = s.var
    gp = GradProgram(forward, backward, b.grads, cotangent, containers, tapes, list(b.counters.values()))
    gp.forward_containers = [c for c in prog.containers.values() if c.kind != "arg"] + \
        list(tapes.values()) + gp.counters
    gp.uncomputed = uncomputed
    return gp


def _zero_inits(b: ReverseBuilder, prog: Program):
    """Where each adjoint is zeroed: at the start of the backward sweep, or at the start of the
    reversed body of the innermost loop its shape varies in."""
    varying = {}
    for s in walk(prog.body):
        if isinstance(s, (For, While)):
            written = {s.var} if isinstance(s, For) else set()
            for t in walk(s.body):
                if isinstance(t, Assign):
                    written.add(t.dst.container)
                elif isinstance(t, Call):
                    written |= set(t.outputs)
                elif isinstance(t, For):
                    written.add(t.var)
            varying[s] = written
    popped = {t.ref.container: t for t in walk(prog.body) if isinstance(t, Pop) and t.tape in b.tape_grads}
    placement = {}
    for c, g in b.grads.items():
        deps = {r.ref.container for d in c.shape for r in iter_reads(d)}
        loop = None
        for enclosing in _loops_around_first_write(prog.body, c) or ():
            if varying[enclosing] & deps:
                loop = enclosing
        if loop is not None and c in popped:
            # its adjoint would have to outlive the iteration that zeroes it, through the adjoint tape
            raise UnsupportedError(f"{popped[c].loc or loop.loc}: unsupported reverse mode over a gradient program "
                                   "whose tape holds values of a size that changes from one iteration to the next "
                                   "(a masked read x[m] in a loop): take this second derivative forward over "
                                   "reverse (flowgrad.hvp, flowgrad.hessian, or jvp of grad(f))")
        init = Assign(Ref(g), Const(0.0))
        if loop is not None and _read_outside(prog.body, loop, c):
            # what is read after the loop holds the last iteration's value, whose adjoint the sweep
            # adds before it reverses that iteration: zeroed once at the top, and in the loop from
            # the second reversed iteration on
            placement.setdefault(None, []).append(init)
            init = (init,)
        placement.setdefault(loop, []).append(init)
    return placement


def _read_outside(stmts, loop, c):
    """Whether a statement outside ``loop`` reads ``c``."""
    for s in stmts:
        if s is loop:
            continue
        if any(r.ref.container is c for r in stmt_reads(s)):
            return True
        if any(_read_outside(body, loop, c) for body in child_blocks(s)):
            return True
    return False


def _first_iteration(loop):
    """Whether ``loop`` (a For) is in its first iteration: its variable at the first value it takes."""
    var = scalar(loop.var)
    if not loop.reverse:
        return op("equal", var, loop.start)
    step = const_value(loop.step)
    if not step:
        raise UnsupportedError(f"{loop.loc}: unsupported reverse mode through a loop with a step only known at run "
                               "time, whose values of a changing size are read after it: give the step as a constant")
    span = op("subtract", loop.stop, loop.start) if step > 0 else op("subtract", loop.start, loop.stop)
    trips = op("floor_divide", op("add", span, Const(abs(step) - 1)), Const(abs(step)))
    return op("equal", var, op("add", loop.start, op("multiply", op("subtract", trips, Const(1)), loop.step)))


def _sink_zero_inits(stmts):
    """A whole ``g = 0`` followed, with nothing touching ``g`` in between, by a loop over the full
    extent of one of ``g``'s axes whose body touches ``g`` only at the loop's position on that
    axis (``g[i, :]`` in iteration ``i``) becomes ``g[i, :] = 0`` at the top of the loop body:
    each iteration clears the one slice it owns, just before its first use, and
    ``_fold_zero_inits`` can then merge that clear into the first accumulation."""
    out = list(stmts)
    k = 0
    while k < len(out):
        s = out[k]
        if _clears(s) and s.dst.is_whole() and s.dst.container.ndim:
            c = s.dst.container
            for j in range(k + 1, len(out)):
                t = out[j]
                if isinstance(t, For) and touches(t, c):
                    axis = _owned_axis(t, c)
                    if axis is not None:
                        items = [Index(scalar(t.var)) if a == axis else Slice(0, d, 1)
                                 for a, d in enumerate(c.shape)]
                        clear = Assign(Ref(c, items), Const(0.0))
                        out[j] = For(t.var, t.start, t.stop, t.step, [clear] + list(t.body), t.reverse, t.loc)
                        del out[k]
                        k -= 1
                    break
                if touches(t, c):
                    break
        k += 1
    return out


def _owned_axis(loop, c):
    """The axis of ``c`` that ``loop`` runs over in full (0 .. extent, step 1) and at whose loop
    position alone its body touches ``c``; None if there is none."""
    if const_value(loop.start) != 0 or const_value(loop.step) != 1:
        return None
    refs = [r.ref for u in walk(loop.body) for r in stmt_reads(u)] + \
        [w for u in walk(loop.body) for w in stmt_writes(u)]
    refs = [r for r in refs if r.container is c]
    if any(isinstance(u, For) and u.var is loop.var for u in walk(loop.body)):
        return None
    for axis, extent in enumerate(c.shape):
        if not same_expr(loop.stop, extent):
            continue
        if all(_item_at(r, axis) is not None and same_expr(_item_at(r, axis), scalar(loop.var)) for r in refs):
            return axis
    return None


def _item_at(ref, axis):
    """The index expression of ``ref`` along container axis ``axis`` if it is a single position."""
    items = [it for it in ref.items if not isinstance(it, NewAxis)]
    it = items[axis] if axis < len(items) else None
    return it.at if isinstance(it, Index) else None


def _read_counts(stmts):
    counts = {}
    for t in walk(stmts):
        for r in stmt_reads(t):
            counts[r.ref.container] = counts.get(r.ref.container, 0) + 1
    return counts


def _clears(s):
    """Whether ``s`` writes zero into a view (``g[v] = 0``)."""
    return isinstance(s, Assign) and not s.accumulate and const_value(s.expr) == 0


def _is_zero_fill(s, c=None):
    """``c = 0`` (any container, or ``c``), an array cleared whole or a scalar."""
    return _clears(s) and s.dst.is_whole() and (c is None or s.dst.container is c)


def _rotate_zero_resets(stmts, reads, zero_at_top=frozenset()):
    """An adjoint that a loop body clears whole after its last use (``g = 0`` at the end of each
    reversed iteration), that is zero on entry to the loop and that nothing outside the loop
    reads, is cleared at the top of the body instead, once per iteration. ``_fold_zero_inits``
    then merges that clear into the first accumulation, ``g += e`` into ``g = e``: one pass over
    the adjoint per iteration instead of three (clear, read and write). A clear just before the
    loop goes too.

    ``reads``: the number of reads of each container in the whole sweep; ``zero_at_top``: the
    containers zero at the start of ``stmts`` (a loop body whose loop is entered with them zero
    and leaves them zero at the end of each iteration)."""
    out = list(stmts)
    k = 0
    while k < len(out):
        loop = out[k]
        if not isinstance(loop, For):
            out[k] = map_blocks(loop, lambda b: _rotate_zero_resets(b, reads))
            k += 1
            continue

        def before(c):
            """Index of the last statement before the loop touching ``c``, and whether ``c`` is zero there."""
            p = next((i for i in range(k - 1, -1, -1) if touches(out[i], c)), None)
            return p, (c in zero_at_top if p is None else _is_zero_fill(out[p], c))

        cleared = {t.dst.container for t in walk(loop.body) if _is_zero_fill(t)}
        inner = frozenset(c for c in cleared if before(c)[1] and _leaves_zero(loop.body, c))
        body = _rotate_zero_resets(loop.body, reads, inner)
        inside = _read_counts(body)
        for j in range(len(body) - 1, -1, -1):
            if not _is_zero_fill(body[j]):
                continue
            c = body[j].dst.container
            if c not in inner or any(touches(t, c) for t in body[j + 1:]) or \
                    inside.get(c, 0) != reads.get(c, 0):     # read after the loop
                continue
            del body[j]
            body.insert(0, Assign(Ref(c), Const(0.0)))
            p, _ = before(c)
            if p is not None:
                del out[p]
                k -= 1
        out[k] = For(loop.var, loop.start, loop.stop, loop.step, body, loop.reverse, loop.loc)
        k += 1
    return out


def _merge_part_clears(stmts):
    """``g[:, :k] = 0`` followed by ``g[:, k:] = 0`` (the adjoint of a concatenation cleared as
    its parts are handed on), with nothing in between touching the first part, becomes one clear
    of ``g`` where the second was: a whole clear, which ``_rotate_zero_resets`` can move."""
    out = [map_blocks(s, _merge_part_clears) for s in stmts]
    k = 0
    while k < len(out):
        s = out[k]
        if _clears(s) and not s.dst.is_whole():
            c = s.dst.container
            for j in range(k + 1, len(out)):
                t = out[j]
                if _clears(t) and t.dst.container is c and _halves(s.dst, t.dst):
                    out[j] = Assign(Ref(c), Const(0.0), loc=t.loc)
                    del out[k]
                    k -= 1
                    break
                if any(not apart(r.ref, s.dst) for u in walk([t]) for r in stmt_reads(u) if r.ref.container is c) or \
                        any(not apart(w, s.dst) for u in walk([t]) for w in stmt_writes(u) if w.container is c):
                    break
        k += 1
    return out


def _halves(a, b):
    """Whether views ``a`` and ``b`` of one container together cover it exactly: alike but along
    one axis, where their unit-step slices meet."""
    if a.perm is not None or b.perm is not None or len(a.items) != len(b.items):
        return False
    differ = [p for p, (x, y) in enumerate(zip(a.items, b.items))
              if not (isinstance(x, Slice) and isinstance(y, Slice) and same_expr(x.start, y.start)
                      and same_expr(x.size, y.size) and same_expr(x.step, y.step))]
    if len(differ) != 1:
        return False
    p = differ[0]
    x, y = a.items[p], b.items[p]
    if not (isinstance(x, Slice) and isinstance(y, Slice)) or const_value(x.step) != 1 or const_value(y.step) != 1:
        return False
    if difference(x.start, y.start + y.size) == 0:
        x, y = y, x                       # y's part comes first
    if difference(y.start, x.start + x.size) != 0:
        return False
    items = list(a.items)
    items[p] = Slice(x.start, x.size + y.size, Const(1))
    return Ref(a.container, items).is_whole()


def _leaves_zero(body, c):
    """Whether a loop body that starts with ``c`` zero ends with it zero."""
    touching = [i for i, t in enumerate(body) if touches(t, c)]
    if not touching:
        return True
    last = body[touching[-1]]
    if _is_zero_fill(last, c):
        return True
    if isinstance(last, For):
        entry = len(touching) == 1 or _is_zero_fill(body[touching[-2]], c)
        return entry and _leaves_zero(last.body, c)
    return False


def _fold_zero_inits(stmts):
    """``g[v] = 0`` followed, with nothing touching ``g`` in between, by ``g[v] += e`` (the same
    view; ``e`` not reading ``g``) becomes ``g[v] = e``: one pass over the adjoint instead of two.
    Sums into other views of ``g`` in between (``V[:i+1] = p * V[1:i+2] + q * V[:i+1]``'s adjoint
    adds into both views) commute with it: ``g[v] = e`` moves ahead of the first of them, where
    what ``e`` reads already holds its value."""
    out = [map_blocks(s, _fold_zero_inits) for s in stmts]
    k = 0
    while k < len(out):
        s = out[k]
        if _clears(s):
            c = s.dst.container
            first_sum = None
            for j in range(k + 1, len(out)):
                t = out[j]
                adds = isinstance(t, Assign) and t.accumulate and t.dst.container is c \
                    and not any(r.ref.container is c for r in iter_reads(t.expr))
                if adds and same_ref(t.dst, s.dst):
                    at = j if first_sum is None else first_sum
                    if any(w.container is r.ref.container for u in walk(out[at:j]) for w in stmt_writes(u)
                           for r in stmt_reads(Assign(t.dst, t.expr, loc=t.loc))):
                        break           # (what it reads, its view's bounds too, is not ready there yet)
                    del out[j]
                    out.insert(at, Assign(t.dst, t.expr, accumulate=False, loc=t.loc))
                    del out[k]
                    k -= 1
                    break
                if adds:
                    first_sum = j if first_sum is None else first_sum
                    continue
                if any(r.ref.container is c for u in walk([t]) for r in stmt_reads(u)) or \
                        any(w.container is c for u in walk([t]) for w in stmt_writes(u)):
                    break
        k += 1
    return out


def _loops_around_first_write(stmts, c, path=()):
    """The loops enclosing the first write of ``c`` (outermost first), or None."""
    for s in stmts:
        if isinstance(s, Assign) and s.dst.container is c or isinstance(s, Call) and c in s.outputs:
            return path
        inner = path + (s,) if isinstance(s, (For, While)) else path
        for body in ((s.body,) if isinstance(s, (For, While)) else
                     (s.then, s.orelse) if isinstance(s, If) else ()):
            found = _loops_around_first_write(body, c, inner)
            if found is not None:
                return found
    return None


def _place_zero_inits(backward, placement, b):
    top = placement.pop(None, [])

    def visit(stmts, forward_loops):
        out = []
        for s in stmts:
            if isinstance(s, For):
                body = visit(s.body, forward_loops)
                src = forward_loops.get(id(s))
                inits = [i if isinstance(i, Assign) else If(op("logical_not", _first_iteration(s)), list(i))
                         for i in placement.get(src, [])] if src else []
                out.append(For(s.var, s.start, s.stop, s.step, inits + body, s.reverse, s.loc))
            elif isinstance(s, If):
                out.append(If(s.cond, visit(s.then, forward_loops), visit(s.orelse, forward_loops), s.loc))
            else:
                out.append(s)
        return out

    # map each backward loop to its forward loop: a For over the same var, or a While's trips
    fmap = {}
    for s in walk(backward):
        if isinstance(s, For):
            for fwd in placement:
                if isinstance(fwd, For) and fwd.var is s.var:
                    fmap[id(s)] = fwd
                elif isinstance(fwd, While) and b.counters.get(fwd) is not None and \
                        isinstance(s.stop, Read) and s.stop.ref.container is b.counters[fwd]:
                    fmap[id(s)] = fwd
    return top, visit(backward, fmap)


__all__ = ["activity", "build_reverse", "GradProgram", "KEPT_OUTPUTS", "same_expr", "NewAxis"]
