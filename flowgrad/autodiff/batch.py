"""Many tangent directions in one program: the batched tangent program (``jacfwd``, ``hessian``).

``build_tangent`` gives a program carrying one tangent per active value. Here every container
whose values depend on the seeds (found by following the data from them) gets a leading axis of
``n_dirs`` directions, and each statement writing one is rewritten to act on all directions:

- an elementwise assignment (``t_y[s] = cos(x[s]) * t_x[s]``) acts on all directions at once:
  its destination and each batched operand take the direction axis first, the operands padded
  with length-1 axes to the destination's rank so that NumPy's right-aligned broadcasting lines
  the direction axes up; the primal operands broadcast as they are;
- a sum over given axes of such a value sums all directions at once, its axes shifted by one;
- any other statement writing a batched value (a call, a gather) runs once per direction in a
  loop over them, reading direction ``d`` of each batched operand; a call writes its whole
  outputs, so it writes a per-direction slot that is then stored as direction ``d`` (an in-place
  call first loads the slot);
- tape pushes and pops of batched values move all directions at once.

A statement that wrote a whole value writes, batched, a fresh array before its loop over the
directions fills it: what held the old one (a tape entry pushed without a copy, since the write
rebinds) keeps it, as before.

The primal statements are untouched and run once, whatever the number of directions. The result
is the program's result and its batched tangent, of shape ``(n_dirs,) + result.shape``.
"""
from __future__ import annotations

from ..errors import UnsupportedError
from ..ir.core import (I64, Assign, Call, Const, Container, For, If, Index, NewAxis, Op, Pop, Program, Push,
                       Read, Ref, Slice, Take, While, broadcast_shapes, iter_reads, map_blocks, scalar, stmt_reads,
                       walk)
from .rules import CALLS


def _direction_dependent(body, seeds):
    """The containers whose values depend on ``seeds``, with the tapes that carry them."""
    batched = set(seeds)
    changed = True
    while changed:
        changed = False
        for s in walk(body):
            if isinstance(s, (For, While, If)):
                continue
            if isinstance(s, Pop):
                hit, written = s.tape in batched, [s.ref.container]
            else:
                hit = any(r.ref.container in batched for r in stmt_reads(s))
                written = [s.dst.container] if isinstance(s, Assign) else \
                    list(s.outputs) if isinstance(s, Call) else [s.tape] if isinstance(s, Push) else []
            for c in written:
                if hit and c not in batched:
                    batched.add(c)
                    changed = True
    return batched


class _Batcher:
    def __init__(self, batched, n_dirs, containers, namer):
        self.n_dirs, self.containers, self.namer = n_dirs, containers, namer
        self.wide = {}                  # container -> its batched container
        for c in sorted(batched, key=lambda c: c.name):
            if c.kind == "tape":
                self.wide[c] = c
                continue
            w = Container(namer(c.name + "_dirs"), c.dtype, (scalar(n_dirs),) + c.shape,
                          "arg" if c.kind == "arg" else "transient")
            self.wide[c] = w
            containers[w.name] = w

    # --- references ---

    def all_dirs(self, ref, pad=0):
        """``ref`` over every direction: the direction axis first, then ``pad`` length-1 axes."""
        items = (Slice(0, scalar(self.n_dirs), 1),) + (NewAxis(),) * pad + ref.items
        perm = None
        if ref.perm is not None:
            perm = tuple(range(1 + pad)) + tuple(p + 1 + pad for p in ref.perm)
        return Ref(self.wide[ref.container], items, perm)

    def one_dir(self, ref, d):
        return Ref(self.wide[ref.container], (Index(scalar(d)),) + ref.items, ref.perm)

    def map_reads(self, e, fn):
        """``e`` with each Read of a batched container replaced by ``fn(ref)``."""
        if isinstance(e, Read):
            return Read(fn(e.ref)) if e.ref.container in self.wide else e
        if isinstance(e, Op):
            args = tuple(self.map_reads(a, fn) for a in e.args)
            return Op(e.name, args, e.dtype, broadcast_shapes(*(a.shape for a in args)))
        if isinstance(e, Take):
            src = fn(e.source) if e.source.container in self.wide else e.source
            return Take(src, e.index)
        return e

    # --- statements ---

    def block(self, stmts):
        out = []
        for s in stmts:
            out += self.stmt(s)
        return out

    def stmt(self, s):
        if isinstance(s, (For, While, If)):
            return [map_blocks(s, self.block)]
        if isinstance(s, Push):
            if s.tape not in self.wide:
                return [s]
            return [Push(s.tape, self.all_dirs(s.ref), s.loc, s.copy)]
        if isinstance(s, Pop):
            if s.tape not in self.wide:
                return [s]
            return [Pop(s.tape, self.all_dirs(s.ref), s.loc)]
        if isinstance(s, Assign):
            if s.dst.container not in self.wide:
                return [s]
            return self.assign(s)
        if isinstance(s, Call):
            if not any(c in self.wide for c in s.outputs):
                return [s]
            return self.call(s)
        raise TypeError(f"cannot batch {s!r}")

    def _elementwise(self, e, rank):
        """Whether ``e`` is made of elementwise nodes whose batched reads have rank <= ``rank``."""
        if isinstance(e, Take):
            return False
        if isinstance(e, Read):
            return e.ref.container not in self.wide or len(e.ref.shape) <= rank
        if isinstance(e, Op):
            return all(self._elementwise(a, rank) for a in e.args)
        return True

    def assign(self, s):
        rank = len(s.dst.shape)
        if self._elementwise(s.expr, rank):
            expr = self.map_reads(s.expr, lambda r: self.all_dirs(r, rank - len(r.shape)))
            return [Assign(self.all_dirs(s.dst), expr, s.accumulate, s.loc)]
        d = self._direction_var()
        expr = self.map_reads(s.expr, lambda r: self.one_dir(r, d))
        alloc = self.fresh([s.dst.container]) if s.dst.is_whole() and not s.accumulate else []
        return alloc + [For(d, 0, scalar(self.n_dirs), 1,
                            [Assign(self.one_dir(s.dst, d), expr, s.accumulate, s.loc)], loc=s.loc)]

    def fresh(self, written):
        """Statements making fresh batched arrays for the containers ``written`` whole: a loop over
        the directions then fills each in place, where the statement it comes from bound a new
        array (and the shape may be known only here, a masked gather's count)."""
        return [Assign(Ref(self.wide[c]), Const(0.0)) for c in written]

    def call(self, s):
        if s.op == "sum" and s.inputs[0].shape and self._elementwise(s.inputs[0], len(s.inputs[0].shape)):
            return self.sum_all_dirs(s)
        d = self._direction_var()
        slots = {}
        for c in s.outputs:
            if c in self.wide:
                slot = Container(self.namer(c.name + "_dir"), c.dtype, c.shape, "transient")
                self.containers[slot.name] = slot
                slots[c] = slot

        def read(r):
            if r.container in slots:
                return r.with_container(slots[r.container])
            return self.one_dir(r, d)
        inputs = [self.map_reads(e, read) for e in s.inputs]
        loads = CALLS[s.op].inplace or any(r.ref.container in slots for e in s.inputs for r in iter_reads(e))
        body = [Assign(Ref(slot), Read(self.one_dir(Ref(c), d))) for c, slot in slots.items() if loads]
        body.append(Call(s.op, inputs, [slots.get(c, c) for c in s.outputs], s.attrs, s.loc))
        body += [Assign(self.one_dir(Ref(c), d), Read(Ref(slot))) for c, slot in slots.items()]
        fresh = [] if CALLS[s.op].inplace else self.fresh(slots)
        return fresh + [For(d, 0, scalar(self.n_dirs), 1, body, loc=s.loc)]

    def sum_all_dirs(self, s):
        """A sum over given axes of an elementwise value: one sum over all directions, each axis
        shifted past the direction axis."""
        (e,), (out,) = s.inputs, s.outputs
        rank = len(e.shape)
        axis = s.attrs["axis"]
        axes = tuple(range(1, rank + 1)) if axis is None else \
            tuple((a % rank) + 1 for a in (axis if isinstance(axis, tuple) else (axis,)))
        expr = self.map_reads(e, lambda r: self.all_dirs(r, rank - len(r.shape)))
        if out not in self.wide:            # read all directions but made from none: not batched
            return [s]
        return [Call("sum", [expr], [self.wide[out]], dict(s.attrs, axis=axes), s.loc)]

    def _direction_var(self):
        d = Container(self.namer("dir"), I64, (), "transient")
        self.containers[d.name] = d
        return d


def batch_tangent(tp: Program, n_seeds: int, namer) -> Program:
    """The tangent program ``tp`` (``build_tangent``'s, whose last ``n_seeds`` parameters are the
    seeds) over many directions at once: parameters ``tp``'s with each seed of shape
    ``(n_dirs,) + shape``, then the number of directions ``n_dirs``; results the primal result and
    its tangents, ``(n_dirs,) + result.shape``."""
    containers = dict(tp.containers)
    n_dirs = Container(namer("n_dirs"), I64, (), "arg")
    containers[n_dirs.name] = n_dirs
    seeds = tp.params[len(tp.params) - n_seeds:]
    result, t_result = tp.results
    batched = _direction_dependent(tp.body, seeds) | {t_result}
    for st in walk(tp.body):
        head = [st.cond] if isinstance(st, (While, If)) else [st.start, st.stop, st.step] if isinstance(st, For) else []
        if any(r.ref.container in batched for e in head for r in iter_reads(e)):
            # the directions would take different paths (a fixed point's tangent iteration, run until
            # the tangent settles): one program cannot carry them all
            raise UnsupportedError(f"{st.loc or 'here'}: unsupported batched directions (jacfwd, hessian) through "
                                   "control flow that depends on the tangent (a fixed point's tangent iteration): "
                                   "take jvp or hvp once per direction, or jacrev / reverse mode")
    b = _Batcher(batched, n_dirs, containers, namer)
    body = b.block(tp.body)
    params = list(tp.params[:len(tp.params) - n_seeds]) + [b.wide[s] for s in seeds] + [n_dirs]
    return Program(tp.name + "_dirs", params, body, [result, b.wide[t_result]], containers)


__all__ = ["batch_tangent"]
