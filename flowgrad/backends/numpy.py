"""Reference backend: the IR as readable, vectorised NumPy source.

Whole-container writes rebind a fresh array and partial writes update in place, so no two
containers ever share memory at run time; a tape entry for a rebinding write can therefore
hold the old array itself rather than a copy.
"""
from __future__ import annotations

import functools

import numpy as np

from ..autodiff.rules import CALLS
from ..ir.elements import ELEMENTS
from . import Located
from ..ir.core import (Assign, Call, Const, Expr, For, If, Index, NewAxis, Op, Pop, Push, Read, Slice,
                       While, const_value, iter_reads, stmt_containers, stmt_reads, stmt_writes, walk,
                       child_blocks)

_SCALAR_TYPE = {"f": "np.{}", "i": "int", "u": "int", "b": "bool"}


def dtype_src(dt) -> str:
    return f"np.{np.dtype(dt).name}"


def _scalar_ctor(dt) -> str:
    dt = np.dtype(dt)
    return f"np.{dt.name}" if dt.kind in "fc" else _SCALAR_TYPE[dt.kind]


def expr_src(e) -> str:
    if isinstance(e, Const):
        v = e.value
        if isinstance(v, float) and not np.isfinite(v):
            return f"np.float64({str(v)!r})"
        if isinstance(v, complex) and not np.isfinite(v):
            return f"complex(float({str(v.real)!r}), float({str(v.imag)!r}))"
        return repr(v)
    if isinstance(e, Read):
        return ref_src(e.ref)
    if isinstance(e, Op):
        args = [expr_src(a) for a in e.args]
        el = ELEMENTS[e.name]
        if el.infix:
            return f"({args[0]} {el.infix} {args[1]})"
        if e.name == "negative":
            return f"(-{args[0]})"
        if el.kind == "cast":
            if e.shape == ():
                return f"{_scalar_ctor(e.dtype)}({args[0]})"
            return f"np.asarray({args[0]}).astype({dtype_src(e.dtype)})"
        if e.shape == () and e.name in ("logical_and", "logical_or", "logical_not"):
            word = {"logical_and": "and", "logical_or": "or"}.get(e.name)
            return f"(not {args[0]})" if word is None else f"({args[0]} {word} {args[1]})"
        if e.shape == () and e.dtype.kind in "iu" and e.name in ("maximum", "minimum", "where"):
            # integer scalars (view bounds): Python's own, not a NumPy call on each
            if e.name == "where":
                return f"({args[1]} if {args[0]} else {args[2]})"
            return f"{e.name[:3]}({args[0]}, {args[1]})"
        return f"{el.function}({', '.join(args)})"
    raise TypeError(f"cannot emit {e!r}")


def _slice_src(it: Slice) -> str:
    start, size, step = it.start, it.size, it.step
    s0, n, st = const_value(start), const_value(size), const_value(step)
    # a step of unknown sign may be negative: the stop past the axis' start is then no stop
    if st is None or st < 0:
        if s0 is not None and n is not None:
            stop = s0 + n * st
            stop_src = "" if stop < 0 else str(stop)
        else:
            stop_src = f"_rt.slice_stop({expr_src(start + size * step)})"
        return f"{expr_src(start)}:{stop_src}:{expr_src(step)}"
    stop = expr_src(start + size * step) if st != 1 else expr_src(start + size)
    text = f"{'' if s0 == 0 else expr_src(start)}:{stop}"
    if st != 1:
        text += f":{expr_src(step)}"
    return text


def ref_src(r) -> str:
    c = r.container
    if c.ndim == 0 and not r.items:
        return c.name
    if r.is_whole():
        return c.name
    parts = []
    for it in r.items:
        if isinstance(it, Index):
            parts.append(expr_src(it.at))
        elif isinstance(it, NewAxis):
            parts.append("None")
        else:
            parts.append(_slice_src(it))
    base = f"np.asarray({c.name})" if c.ndim == 0 else c.name       # a scalar given new axes
    text = f"{base}[{', '.join(parts)}]" if parts else c.name
    if r.perm is not None:
        text += f".transpose({', '.join(map(str, r.perm))})"
    return text


def target_src(r) -> str:
    """``ref_src`` as the target of an assignment (a transposed view is assigned through ``[...]``)."""
    return ref_src(r) + ("[...]" if r.perm is not None else "")


def shape_src(shape) -> str:
    return "(" + "".join(f"{expr_src(d)}, " for d in shape) + ")"


def _attr_src(v):
    if isinstance(v, Expr):
        return expr_src(v)
    if isinstance(v, tuple):
        return tuple(_attr_src(x) for x in v)
    return v


class Emitter(Located):
    def __init__(self):
        self.lines = []
        self.loc = None          # the user's line of the statement being emitted
        self.locs = {}           # line index -> that line, for run-time errors (``located``)

    def line(self, text, indent):
        if self.loc is not None:
            self.locs[len(self.lines)] = str(self.loc)
        self.lines.append("    " * indent + text)

    def source(self):
        """The module source: the header, the lines, and the table of user lines by source line."""
        offset = HEADER.count("\n") + 1
        table = {k + offset: loc for k, loc in self.locs.items()}
        return HEADER + "\n".join(self.lines) + f"\n\n\n_LOCS = {table!r}\n"

    def block(self, stmts, indent):
        if not stmts:
            self.line("pass", indent)
        for s in stmts:
            self.stmt(s, indent)

    def sweep(self, stmts, indent, keep):
        """A top-level statement list whose arrays are let go after their last use (``keep``:
        containers used later or returned), so memory follows the program's live set."""
        frees = last_uses(stmts, keep)
        if not stmts:
            self.line("pass", indent)
        for i, s in enumerate(stmts):
            self.stmt(s, indent)
            if frees.get(i):
                self.line(f"{' = '.join(frees[i])} = None", indent)

    def _stmt(self, s, ind):
        if isinstance(s, Assign):
            self.assign(s, ind)
        elif isinstance(s, Call):
            self.call(s, ind)
        elif isinstance(s, For):
            rng = f"range({expr_src(s.start)}, {expr_src(s.stop)}, {expr_src(s.step)})"
            if const_value(s.step) == 1:
                rng = f"range({expr_src(s.start)}, {expr_src(s.stop)})"
            self.line(f"for {s.var.name} in {'reversed(' + rng + ')' if s.reverse else rng}:", ind)
            self.block(s.body, ind + 1)
        elif isinstance(s, While):
            self.line(f"while {expr_src(s.cond)}:", ind)
            self.block(s.body, ind + 1)
        elif isinstance(s, If):
            self.line(f"if {expr_src(s.cond)}:", ind)
            self.block(s.then, ind + 1)
            if s.orelse:
                self.line("else:", ind)
                self.block(s.orelse, ind + 1)
        elif isinstance(s, Push):
            src = ref_src(s.ref)
            if s.ref.container.ndim and not s.ref.is_whole():
                src += ".copy()"
            elif s.ref.container.ndim and s.copy:
                src = f"_rt.kept({src})"          # a whole array, or None where it is not made yet
            self.line(f"{s.tape.name}.append({src})", ind)
        elif isinstance(s, Pop):
            if s.ref.container.ndim == 0 or s.ref.is_whole():
                self.line(f"{s.ref.container.name} = {s.tape.name}.pop()", ind)
            else:
                self.line(f"{target_src(s.ref)} = {s.tape.name}.pop()", ind)
        else:
            raise TypeError(f"cannot emit {s!r}")

    def assign(self, s: Assign, ind):
        c, rhs = s.dst.container, expr_src(s.expr)
        if c.ndim == 0:
            if s.accumulate:
                self.line(f"{c.name} += {rhs}", ind)
            else:
                self.line(f"{c.name} = {_scalar_ctor(c.dtype)}({rhs})", ind)
            return
        if s.dst.is_whole() and not s.accumulate:
            shape = c.shape
            if _same_shape(s.expr.shape, shape):
                fn = "np.array" if isinstance(s.expr, Read) else "np.asarray"
                self.line(f"{c.name} = {fn}({rhs}, dtype={dtype_src(c.dtype)})", ind)
            else:
                self.line(f"{c.name} = np.full({shape_src(shape)}, {rhs}, dtype={dtype_src(c.dtype)})", ind)
            return
        target = target_src(s.dst)
        self.line(f"{target} {'+=' if s.accumulate else '='} {rhs}", ind)

    def call(self, s: Call, ind):
        rule = CALLS[s.op]
        ins = [expr_src(e) for e in s.inputs]
        attrs = {k: _attr_src(v) for k, v in s.attrs.items()}
        src = rule.numpy(ins, attrs)
        if rule.inplace:
            self.line(src.format(out=s.outputs[0].name), ind)
            return
        if len(s.outputs) > 1:
            self.line(f"{', '.join(c.name for c in s.outputs)} = {src}", ind)
            return
        out = s.outputs[0]
        if out.ndim == 0:
            src = f"{_scalar_ctor(out.dtype)}({src})"
        elif np.dtype(out.dtype) != np.float64 or s.op in ("sum_to",):
            src = f"np.asarray({src}, dtype={dtype_src(out.dtype)})"
        self.line(f"{out.name} = {src}", ind)


def _same_shape(a, b):
    from ..ir.core import same_expr
    return len(a) == len(b) and all(same_expr(x, y) for x, y in zip(a, b))


def _init_lines(containers, params, stmts):
    """Initial bindings of the containers ``stmts`` use. An array whose shape is known at entry
    and that the program may write in parts (or read before any write) exists from the start;
    one only ever written whole is made by its first write."""
    params = set(params)
    lines = []
    used, early = buffered(stmts)
    for c in sorted(containers, key=lambda c: c.name):
        if c not in used:
            continue
        if c.kind == "tape":
            lines.append(f"{c.name} = []")
        elif c.ndim == 0:
            lines.append(f"{c.name} = {_scalar_ctor(c.dtype)}(0)")
        elif c in early and all(r.ref.container in params for d in c.shape for r in iter_reads(d)):
            lines.append(f"{c.name} = np.empty({shape_src(c.shape)}, dtype={dtype_src(c.dtype)})")
        else:
            lines.append(f"{c.name} = None")
    return lines


def buffered(stmts):
    """(containers used, arrays needing a buffer before their first write): those written in
    part, accumulated into, updated in place by a call, or read before a whole write has made
    them. A whole write makes its array for what follows in the same block (a loop body's for
    that body only: the loop may not run)."""
    used, buffered = set(), set()

    def block(body, made):
        made = set(made)
        for s in body:
            used.update(stmt_containers(s))
            for r in stmt_reads(s):
                if r.ref.container not in made:
                    buffered.add(r.ref.container)
            for w in stmt_writes(s):
                whole = w.is_whole() and not (isinstance(s, Assign) and s.accumulate) and \
                    not (isinstance(s, Call) and CALLS[s.op].inplace)
                if whole:
                    made.add(w.container)
                elif w.container not in made:
                    buffered.add(w.container)
            for inner in child_blocks(s):
                block(inner, made)

    block(stmts, set())
    return used, buffered


def last_uses(stmts, keep):
    """Top-level statement index -> names of the arrays (not in ``keep``) it uses last."""
    last = {}
    for i, s in enumerate(stmts):
        for t in walk([s]):
            for c in stmt_containers(t):
                last[c] = i
    out = {}
    for c, i in last.items():
        if c.ndim and c.kind != "tape" and c not in keep:
            out.setdefault(i, []).append(c.name)
    return {i: sorted(names) for i, names in out.items()}


def _used(stmts):
    return {c for s in walk(stmts) for c in stmt_containers(s)}


def _param_lines(params, written):
    """Arguments as the program's types; arrays it writes are copied (the caller's stay intact)."""
    lines = []
    for p in params:
        if p.ndim == 0:
            lines.append(f"{p.name} = {_scalar_ctor(p.dtype)}({p.name})")
        else:
            fn = "np.array" if p in written else "np.asarray"
            lines.append(f"{p.name} = {fn}({p.name}, dtype={dtype_src(p.dtype)})")
    return lines


def _written(stmts):
    from ..ir.core import stmt_writes, walk
    return {w.container for s in walk(stmts) for w in stmt_writes(s)}


HEADER = ("import numpy as np\nfrom flowgrad.backends import runtime as _rt\n"
          "from flowgrad.checkpoint import schedules as _ckpt\n\n\n")


def emit_forward(prog) -> str:
    """Source of ``def <name>(*params)`` returning the program's result; a program with several
    results (a tangent program: the value and its tangent) returns ``(first, (others...))``."""
    e = Emitter()
    names = ", ".join(p.name for p in prog.params)
    e.line(f"def {prog.name}({names}):", 0)
    for ln in _param_lines(prog.params, _written(prog.body)):
        e.line(ln, 1)
    for ln in _init_lines([c for c in prog.containers.values() if c.kind != "arg"], prog.params, prog.body):
        e.line(ln, 1)
    e.sweep(prog.body, 1, set(prog.results))
    first, rest = prog.results[0].name, [c.name for c in prog.results[1:]]
    e.line(f"return {first}" + (f", ({''.join(r + ', ' for r in rest)})" if rest else ""), 1)
    return e.source()


def emit_vjp(prog, gp, wrt) -> str:
    """Source of ``def <name>_vjp(*params)`` returning ``(result, pullback)``.

    The forward sweep runs at once; ``pullback(cotangent)`` runs the backward sweep over the
    forward's own variables (restoring overwritten values from the tapes) and returns the
    adjoints of ``wrt``.
    """
    e = Emitter()
    names = ", ".join(p.name for p in prog.params)
    e.line(f"def {prog.name}_vjp({names}):", 0)
    for ln in _param_lines(prog.params, _written(gp.forward + gp.backward)):
        e.line(ln, 1)
    fwd_containers = gp.forward_containers
    for ln in _init_lines(fwd_containers, prog.params, gp.forward + gp.backward):
        e.line(ln, 1)
    e.sweep(gp.forward, 1, _used(gp.backward) | set(prog.results))
    e.line("", 1)
    e.line(f"def pullback({gp.cotangent.name}):", 1)
    bound = _used(gp.forward + gp.backward)
    shared = [c.name for c in fwd_containers if c in bound] + [c.name for c in prog.params]
    if shared:
        e.line(f"nonlocal {', '.join(sorted(set(shared)))}", 2)
    ct = gp.cotangent
    if ct.ndim == 0:
        e.line(f"{ct.name} = {_scalar_ctor(ct.dtype)}({ct.name})", 2)
    else:
        e.line(f"{ct.name} = np.asarray({ct.name}, dtype={dtype_src(ct.dtype)})", 2)
    local = [c for c in gp.containers.values() if c not in fwd_containers and c.kind != "arg"]
    for ln in _init_lines(local, prog.params, gp.backward):
        e.line(ln, 2)
    e.sweep(gp.backward, 2, {gp.grads[w] for w in wrt if w in gp.grads})
    outs = []
    for w in wrt:
        g = gp.grads.get(w)
        if g is None:
            outs.append(f"np.zeros({shape_src(w.shape)}, dtype={dtype_src(w.dtype)})" if w.ndim
                        else f"{_scalar_ctor(w.dtype)}(0.0)")
        else:
            outs.append(g.name)
    e.line(f"return ({''.join(o + ', ' for o in outs)})", 2)
    e.line("", 1)
    e.line(f"return {prog.results[0].name}, pullback", 1)
    return e.source()


def compile_source(src: str, name: str, filename: str):
    """Execute generated source and return the function ``name`` (``located``)."""
    namespace = {}
    code = compile(src, filename, "exec")
    exec(code, namespace)  # noqa: S102 - our own generated source
    return located(namespace[name], filename, namespace.get("_LOCS", {}))


def located(fn, filename, locs):
    """``fn``, whose run-time errors (an index out of bounds, sizes that differ) name the user's
    line of the statement that raised them: the generated source line of the innermost frame in
    ``filename``, looked up in ``locs``. A ``(result, pullback)`` result gets its pullback located."""
    @functools.wraps(fn)
    def run(*args):
        try:
            out = fn(*args)
        except (IndexError, ValueError, ZeroDivisionError) as exc:
            where, tb = None, exc.__traceback__
            while tb is not None:
                if tb.tb_frame.f_code.co_filename == filename:
                    where = locs.get(tb.tb_lineno, where)
                tb = tb.tb_next
            text = str(exc)
            if where is None or text.startswith(where.split(":")[0] + ":"):
                raise
            raise type(exc)(f"{where}: {text}") from None
        if isinstance(out, tuple) and len(out) == 2 and callable(out[1]):
            return out[0], located(out[1], filename, locs)
        return out
    return run
