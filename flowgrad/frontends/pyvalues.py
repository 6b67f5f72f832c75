"""Python containers in captured code: lists, tuples, dicts and objects hold values, not names.

A Python list made while capturing holds IR values (arrays as Reads of their containers,
run-time scalars as expressions). Python would hold the *value* an element had when it was
stored, so:

* an element is frozen when it is stored (``freeze``): an expression over arrays (a new array in
  NumPy, or a scalar read from one, ``[x[0]]``) is computed into a container of its own there;
* a scalar expression over scalar containers (``[t]``, ``[t * 2]``, a shape ``(n, 2 * n)``) is
  kept as it is, so that shape symbols stay shape symbols: when one of those scalars is about to
  be written (``t = b``), ``protect`` rewrites every value that reads it, wherever it is held (a
  name, a list, a dict, a tuple, an object), to read a copy taken before the write. A value
  held since before a run-time loop or branch (a ``Scope``) that writes the scalar gets a copy
  taken before that loop or branch.

``Registry`` knows every container the capture made (and the argument pytrees it built), with
the scopes open when it was made: a container made outside a run-time loop cannot be changed
inside it (``check_mutable``: the loop is unrolled when its trip count is known at capture and
small, else the change is refused), nor inside a branch taken at run time, and a container from
outside the function (a global, an argument) cannot be changed at all.
"""
from __future__ import annotations

from ..errors import unsupported
from ..ir.core import Assign, Const, Expr, Read, Ref, iter_reads, scalar, substitute
from .control import Restart

UNROLL_LIMIT = 256      # passes of a loop with a known trip count that capture may unroll


class HoldsValues:
    """A Python value of the captured code that holds IR values (``map_values`` rewrites them)."""

    def map_values(self, fn):
        raise NotImplementedError


class ObjectValue(HoldsValues):
    """An object standing in the captured code for a dataclass or plain object whose
    attributes hold run-time values: an argument's (``outside``: its attributes cannot be
    assigned) or one the code built (``SimState(u, v)``). ``attrs``: attribute -> value;
    ``template``: the object it stands for, if any (its class, and a copy's starting point)."""

    __slots__ = ("cls", "attrs", "template")

    def __init__(self, cls, attrs, template=None):
        self.cls, self.attrs, self.template = cls, dict(attrs), template

    def __repr__(self):
        return f"<{self.cls.__name__} captured>"

    def map_values(self, fn):
        """Rewrite the IR values it holds in place with ``fn``."""
        for k, v in list(self.attrs.items()):
            self.attrs[k] = fn(v)


class Registry:
    """The Python containers a capture made or built for arguments (see the module docstring)."""

    def __init__(self):
        self.info = {}           # id -> (container, loops open when made, outside)

    def add(self, fe, obj, outside=False):
        self.info[id(obj)] = (obj, tuple(fe.rt_scopes), outside)
        return obj

    def get(self, obj):
        entry = self.info.get(id(obj))
        return entry if entry is not None and entry[0] is obj else None

    def __iter__(self):
        return iter(list(self.info.values()))


def made(fe, obj):
    """Register a container the captured code just made; returns it."""
    return fe.pyobjs.add(fe, obj)


def freeze(fe, v, loc):
    """``v`` as a Python container holds it (see the module docstring)."""
    if not isinstance(v, Expr) or isinstance(v, Const):
        return v
    if v.shape == ():
        if any(r.ref.container.ndim for r in iter_reads(v)):
            return fe.materialize(v, "item", loc)      # a scalar read from an array: its value now
        return v
    if isinstance(v, Read):
        return v                     # an array or a view: Python holds that array
    return fe.materialize(v, "t", loc)


def check_mutable(fe, obj, loc, what):
    """Before ``what`` (``rows.append(...)``) changes Python container ``obj``: refuse a change to a
    container from outside the function; where the container was made outside a run-time loop
    or branch now open, unroll that loop (capture restarts) or refuse."""
    entry = fe.pyobjs.get(obj)
    if entry is None or entry[2]:
        raise unsupported(loc, f"{what} on a {type(obj).__name__} from outside the captured function (an "
                               "argument, a global or a closure variable)",
                          "flowgrad does not change the caller's objects: build a new one inside the function "
                          f"(new = {'dict' if isinstance(obj, dict) else 'list'}(old)) and return it")
    scope = _first_new_scope(fe, entry[1])
    if scope is not None:
        unroll(fe, scope, loc, what, f"on a Python {type(obj).__name__} made before that "
                                     f"{'branch' if scope.kind == 'branch' else 'loop'}")


def _first_new_scope(fe, stack):
    for k, scope in enumerate(fe.rt_scopes):
        if k >= len(stack) or stack[k] is not scope:
            return scope
    return None


def unroll(fe, scope, loc, what, detail="", fix=None):
    """Capture again with loop ``scope`` unrolled, where its trip count is known at capture and
    small; else refuse ``what`` (``detail``: more about it), which needs that."""
    if scope.kind == "for" and scope.trips is not None and scope.trips <= UNROLL_LIMIT and scope.key is not None:
        fe.hints[("unroll",) + scope.key] = True
        raise Restart()
    if scope.kind == "branch":
        where = f"under the condition at line {scope.loc.lineno}"
        why = "known only at run time: a Python container cannot change on one path only"
        fix = fix or "compute both values and pick with np.where, or build the container outside the branch"
    else:
        where = f"in the {scope.kind} loop at line {scope.loc.lineno}"
        if scope.trips is None:
            why = "which runs a number of times known only at run time: a Python container cannot change in it"
        else:
            why = f"which makes {scope.trips} passes: flowgrad unrolls such a loop for at most {UNROLL_LIMIT}"
        fix = fix or ("preallocate an array before the loop (rows = np.zeros((n, m))) and assign into it "
                      "(rows[i] = ...), or give the loop a trip count known at capture")
    raise unsupported(loc, f"{what} {where} {detail + ' ' if detail else ''}({why})", fix)


# ----------------------------------------------------------------------------- protect


def protect(fe, c, loc):
    """Before scalar container ``c`` is written: every value that reads it (a name bound to a
    view whose bounds read it, an array sized by it, an element of a Python container holding
    it) is rewritten to read a copy of ``c`` taken now, or before the outermost loop entered
    since the value was bound."""
    copies = {}                  # statement list -> (the copy of c, {array: its resized copy})
    memo = {}

    def rewrite_expr(e, where):
        if not isinstance(e, Expr) or c not in _reads_deep(e):
            return e
        target = _placement(fe, where)
        if id(target) not in copies:
            was = fe.container(c.name + "_was", c.dtype, ())
            _emit_at(fe, target, Assign(Ref(was, ()), scalar(c), loc=loc))
            copies[id(target)] = (was, {})
        was, resized = copies[id(target)]
        if isinstance(e, Read) and e.ref.container.ndim and any(
                c in {r.ref.container for r in iter_reads(d)} for d in e.ref.container.shape):
            source = e.ref.container
            if source not in resized:       # its size reads c: a copy sized by the kept value
                copy = fe.container(source.name, source.dtype,
                                    tuple(substitute(d, c, scalar(was)) for d in source.shape))
                _emit_at(fe, target, Assign(Ref(copy), Read(Ref(source)), loc=loc))
                resized[source] = copy
            e = Read(Ref(resized[source], e.ref.items, e.ref.perm))
        return substitute(e, c, scalar(was))

    for f in fe.frames:
        for name, v in list(f.env.items()):
            if f.owned.get(name) is c and isinstance(v, Read) and v.ref.container is c:
                continue                   # the name being written
            new = rewrite(fe, v, lambda e, w: rewrite_expr(e, w), memo, _binding_stack(fe, f, name, v))
            if new is not v:
                f.env[name] = new
    for obj, stack, _ in fe.pyobjs:
        rewrite(fe, obj, lambda e, w: rewrite_expr(e, w), memo, stack)


def held_in_containers(fe, containers, keep=()):
    """Those of ``containers`` that values in Python containers names reach (but ``keep``) read."""
    hits, memo = set(), {id(k): k for k in keep}

    def fn(e, stack):
        if isinstance(e, Expr):
            hits.update(r.ref.container for r in iter_reads(e) if r.ref.container in containers)
        return e
    for f in fe.frames:                     # what names reach: what the program may still read
        for v in f.env.values():
            if not isinstance(v, Expr):
                rewrite(fe, v, fn, memo, ())
    return hits


def copy_views_of(fe, dests, keep, stmts, loc):
    """At the end of a loop pass, before the containers ``dests`` are written back: values in
    the Python containers names reach (but ``keep``) that read them get copies, taken into
    ``stmts`` now (they are the arrays as they were in this pass)."""
    copies, memo = {}, {id(k): k for k in keep}

    def fn(e, stack):
        if not isinstance(e, Read) or e.ref.container not in dests:
            return e
        c = e.ref.container
        if c not in copies:
            copies[c] = fe.container(c.name + "_pass", c.dtype, c.shape)
            stmts.append(Assign(Ref(copies[c]) if c.ndim else Ref(copies[c], ()), Read(Ref(c) if c.ndim else Ref(c, ())),
                                loc=loc))
        return Read(Ref(copies[c], e.ref.items, e.ref.perm))
    for f in fe.frames:
        for name, v in list(f.env.items()):
            if not isinstance(v, Expr):
                f.env[name] = rewrite(fe, v, fn, memo, ())


def rewrite(fe, v, fn, memo, stack):
    """``v`` with every IR value ``e`` in it replaced by ``fn(e, stack)``: lists, dicts and objects the
    capture made are changed in place, tuples rebuilt (``stack``: the loops open where ``v`` was
    bound, refined by the containers' own)."""
    if isinstance(v, Expr):
        return fn(v, stack)
    key = id(v)
    if key in memo:
        return memo[key]
    entry = fe.pyobjs.get(v) if isinstance(v, (list, dict, tuple, ObjectValue)) else None
    if entry is not None:
        stack = entry[1]
    if isinstance(v, tuple):
        memo[key] = v
        items = [rewrite(fe, x, fn, memo, stack) for x in v]
        if all(a is b for a, b in zip(items, v)):
            return v
        out = type(v)._make(items) if hasattr(type(v), "_make") else tuple(items)
        if entry is not None:
            fe.pyobjs.info[id(out)] = (out, stack, entry[2])
        memo[key] = out
        return out
    memo[key] = v
    if entry is None and not isinstance(v, HoldsValues):
        return v                             # not the capture's: holds no IR values
    if isinstance(v, list):
        for k, x in enumerate(v):
            v[k] = rewrite(fe, x, fn, memo, stack)
    elif isinstance(v, dict):
        for k, x in list(v.items()):
            v[k] = rewrite(fe, x, fn, memo, stack)
    elif isinstance(v, HoldsValues):         # objects, local functions, bound methods
        v.map_values(lambda x: rewrite(fe, x, fn, memo, stack))
    return v


def _binding_stack(fe, frame, name, v):
    """The run-time scopes open when ``frame``'s ``name`` was bound to ``v``: those entered before
    it, judged by the names each scope's frame had on entry (a caller's names predate its callee's
    scopes)."""
    out = []
    for scope in fe.rt_scopes:
        if scope.frame is frame:
            if scope.env.get(name) is v:
                break
        elif _is_caller(fe, frame, scope.frame):
            break
        out.append(scope)
    return tuple(out)


def _is_caller(fe, a, b):
    """Whether frame ``a`` is on the stack below frame ``b`` (``a`` called what runs ``b``)."""
    frames = fe.frames
    ia = next((k for k, f in enumerate(frames) if f is a), None)
    ib = next((k for k, f in enumerate(frames) if f is b), None)
    return ia is not None and ib is not None and ia < ib


def _placement(fe, stack):
    """Where a copy for a value bound with scopes ``stack`` open goes: before the outermost loop or
    branch entered since (the statement list it will be emitted into), else here."""
    scope = _first_new_scope(fe, stack)
    return None if scope is None else scope.out


def _emit_at(fe, target, stmt):
    if target is None:
        fe.emit(stmt)
    else:
        target.append(stmt)


def _reads_deep(e):
    """The containers an expression reads, with those its operands' sizes read."""
    out = set()
    for r in iter_reads(e):
        out.add(r.ref.container)
        for d in r.ref.container.shape:
            out |= {x.ref.container for x in iter_reads(d)}
    return out
