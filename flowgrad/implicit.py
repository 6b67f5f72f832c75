"""Fixed points, differentiated implicitly.

``x = flowgrad.fixed_point(step, x0, *params)`` iterates ``x = step(x, *params)`` to convergence.
Differentiating through that loop would keep every iterate and reverse every step; at a fixed
point ``x* = step(x*, p)`` the implicit function theorem gives the derivative without them:
``dx*/dp = (I - J_x)^-1 J_p`` (``J_x``, ``J_p``: the derivatives of one step at ``x*``). So, in a
function flowgrad captures, the call becomes one operation, ``Call("fixed_point")``, with rules of
its own:

- adjoint: ``(I - J_x^T) lam = g`` (``g``: the adjoint of ``x*``) solved by BiCGSTAB from
  ``lam = g``, each product by ``J_x^T`` a vjp of one step (the gradient program of one step in
  ``x``), then ``p``'s adjoint ``J_p^T lam``;
- tangent: ``(I - J_x) t = J_p dp`` solved the same way with the tangent program of one step.

Memory does not grow with the iteration count, and neither does the adjoint's cost: a Krylov
method needs far fewer products than the forward needs steps (the iteration ``lam = g + J_x^T
lam`` would take as many; complex states still use it). ``x0`` gets no
derivative: the fixed point does not depend on where the iteration started. After
differentiation the call is replaced by the iteration itself (``CallRule.expand``). Both
iterations converge where the forward one does (the spectral radius of ``J_x`` below one).
"""
from __future__ import annotations

import numpy as np

from . import pipeline
from .autodiff.forward import build_tangent
from .autodiff.reverse import build_reverse
from .autodiff.rules import CallRule
from .errors import InputError, unsupported
from .ir.core import (BOOL, F64, I64, Assign, Call, Const, Container, Expr, If, Pop, Program, Push, Read, Ref, While,
                      distinct, iter_reads, op, rename, rename_expr, scalar, stmt_reads, stmt_writes, walk)


def fixed_point(step, x0, *params, tol=1e-10, max_iter=1000):
    """Iterate ``x = step(x, *params)`` from ``x0`` until two successive iterates differ by at most
    ``tol`` (their largest absolute difference), or for ``max_iter`` steps; returns the last iterate.

    In plain Python this is the loop itself. In a function flowgrad differentiates, the result's
    derivative is taken implicitly, at the fixed point (see ``flowgrad.implicit``): the gradient
    solves ``(I - d step/dx)^T lam = g`` by BiCGSTAB, with vector-Jacobian products of one step, so
    memory does not grow with the number of iterations.

    Args:
      step: a function ``step(x, *params)`` returning the next iterate, of ``x``'s shape.
      x0: the starting point (a float array or number).
      *params: the other arguments of ``step`` (what the derivative is taken in).
      tol, max_iter: when to stop.

    Example:
      >>> def solve(b):
      ...     return flowgrad.fixed_point(lambda x, b: 0.5 * np.cos(x) + b, np.zeros_like(b), b)
      >>> flowgrad.grad(lambda b: np.sum(solve(b)))(np.ones(3))          # doctest: +SKIP
    """
    x = np.array(x0, dtype=np.float64) if np.ndim(x0) else float(x0)
    for _ in range(int(max_iter)):
        new = step(x, *params)
        done = float(np.max(np.abs(np.asarray(new) - x))) <= tol
        x = new
        if done:
            break
    return x


# ---------------------------------------------------------------- in captured code


def inline_fixed_point(fe, args, kwargs, loc):
    """``fixed_point(step, x0, *params, tol=..., max_iter=...)`` in captured code: the call, with the
    iteration (its expansion) and one step captured apart for the derivative rules."""
    from .api_nested import _inline, _input
    if len(args) < 2:
        raise InputError(f"{loc}: fixed_point takes a step function and a starting point")
    extra = set(kwargs) - {"tol", "max_iter"}
    if extra:
        raise InputError(f"{loc}: fixed_point() got unexpected keyword arguments {sorted(extra)}")
    step, x0, params = args[0], args[1], list(args[2:])
    tol = fe.to_expr(kwargs.get("tol", 1e-10), loc)
    max_iter = fe.to_expr(kwargs.get("max_iter", 1000), loc)
    x0c = _input(fe, x0, loc, True, "the starting point of fixed_point")
    # the parameters as they are now (the iteration and its adjoint read them later)
    pconts = [_input(fe, p, loc, False, f"parameter {k} of fixed_point") if isinstance(p, Expr) else None
              for k, p in enumerate(params)]
    values = [Read(Ref(c)) if c is not None else p for c, p in zip(pconts, params)]
    pconts = [c for c in pconts if c is not None]
    xs = fe.container("fixed", x0c.dtype, x0c.shape)

    def temp(shape, dtype, hint):
        return fe.container(hint, dtype, shape)
    forward = _iteration(fe, step, xs, x0c, values, tol, max_iter, loc, temp)
    # one step at inputs of its own, for the derivative programs
    wx = fe.container("fx", x0c.dtype, x0c.shape)
    wps = [fe.container("fp", c.dtype, c.shape) for c in pconts]
    swap = dict(zip(map(id, pconts), wps))
    step_args = [Read(Ref(wx))] + [Read(Ref(swap[id(v.ref.container)])) if isinstance(v, Read) and
                                      id(v.ref.container) in swap else v for v in values]
    before = set(fe.containers)
    stmts, outs, tree = _inline(fe, step, step_args, {}, loc, "fixed_point", {wx} | set(wps))
    _check_step(outs, tree, x0c, step, loc)
    inner = {c.name for c in fe.containers.values()} - before
    outside = sorted({r.ref.container for s in walk(stmts) for r in stmt_reads(s)
                      if r.ref.container.name not in inner and r.ref.container not in {wx} | set(wps)},
                     key=lambda c: c.name)
    unit = pipeline.run(pipeline.CAPTURED, pipeline.Unit({"body": stmts}, fe.containers, fe.namer, [outs[0]],
                                                         "numpy", "reverse"))
    attrs = {"forward": forward, "step": (wx, wps, outside, unit.sweeps["body"], outs[0]), "tol": tol,
             "max_iter": max_iter}
    inputs = [Read(Ref(x0c))] + [Read(Ref(c)) for c in pconts + outside]
    fe.emit(Call("fixed_point", inputs, [xs], attrs, loc=loc))
    return Read(Ref(xs))


def _check_step(outs, tree, x0c, step, loc):
    name = getattr(step, "__name__", "step")
    if tree is not None or len(outs) != 1:
        raise unsupported(loc, f"fixed_point of {name}, which returns several values",
                          "return the next iterate only (stack several arrays into one)")
    out = outs[0]
    same = out.ndim == x0c.ndim and all(not (isinstance(a, Const) and isinstance(b, Const)) or a.value == b.value
                                        for a, b in zip(out.shape, x0c.shape))
    if not same:
        raise InputError(f"{loc}: the step of fixed_point ({name}) returns shape {tuple(out.shape)} for an "
                         f"iterate of shape {tuple(x0c.shape)}")


def _distance(a, b, temp):
    """``(statements, err)``: the largest absolute difference of ``a`` and ``b`` into a new scalar."""
    err = temp((), F64, "err")
    d = op("abs", op("subtract", a, b))
    if not d.shape:
        return [Assign(Ref(err, ()), d)], scalar(err)
    t = temp(d.shape, F64, "dist")
    return [Assign(Ref(t), d), Call("max", [Read(Ref(t))], [err], {"axis": None, "keepdims": False})], scalar(err)


def _loop(state, start, body, new, tol, max_iter, temp, scale=None):
    """``state = start``, then ``body`` (after which ``new`` reads the next value) repeated until it
    moves ``state`` by at most ``tol`` (times ``1 + max |scale|``: a size the state is measured
    against, for the derivative iterations) or ``max_iter`` times."""
    k = temp((), I64, "iters")
    go = temp((), BOOL, "go")
    dist, err = _distance(new, Read(Ref(state)), temp)
    top, bound = [], tol
    if scale is not None:
        top, size = _distance(scale, Const(0.0), temp)
        bound = op("multiply", tol, op("add", Const(1.0), size))
    step = body + dist + [
        Assign(Ref(state), new),
        Assign(Ref(k, ()), op("add", scalar(k), Const(1))),
        Assign(Ref(go, ()), op("logical_and", op("greater", err, bound), op("less", scalar(k), max_iter)))]
    return top + [Assign(Ref(state), start), Assign(Ref(k, ()), Const(0)), Assign(Ref(go, ()), Const(True)),
                  While(scalar(go), step)]


def _bicgstab(b, x, matvec, tol, max_iter, temp):
    """Statements solving ``M x = b`` by BiCGSTAB (van der Vorst), from ``x``'s value, to a
    residual of at most ``tol * (1 + max |b|)`` or ``max_iter`` iterations; ``matvec(src, dst)``:
    statements ``dst = M src``. Two products by ``M`` an iteration, seven vectors whatever the
    count; where the method breaks down (a zero inner product) it restarts from the residual."""
    shape, dt = b.shape, b.dtype
    r, rhat, p, v, s_, t = (temp(shape, dt, n) for n in ("kr", "krhat", "kp", "kv", "ks", "kt"))
    rho, rho_new, alpha, omega, beta, tt, k, go = (
        temp((), F64 if n not in ("kiters", "kgo") else (I64 if n == "kiters" else BOOL), n)
        for n in ("krho", "krho_new", "kalpha", "komega", "kbeta", "ktt", "kiters", "kgo"))
    R = lambda c: Read(Ref(c))                                  # noqa: E731
    S = lambda c: scalar(c)                                     # noqa: E731

    def set_(c, e):
        return Assign(Ref(c, ()) if not c.shape else Ref(c), e)

    def dot(a, b_, out):
        prod = op("multiply", R(a), R(b_))
        if not prod.shape:
            return [set_(out, prod)]
        return [Call("sum", [prod], [out], {"axis": None, "keepdims": False})]

    def safe(e):
        return op("where", op("equal", e, Const(0.0)), Const(1.0), e)

    top, size = _distance(R(b), Const(0.0), temp)
    bound = op("multiply", tol, op("add", Const(1.0), size))
    res, err = _distance(R(r), Const(0.0), temp)
    restart = [set_(rhat, R(r)), set_(p, Const(0.0)), set_(v, Const(0.0)),
               set_(rho, Const(1.0)), set_(alpha, Const(1.0)), set_(omega, Const(1.0))]
    init = top + matvec(x, v) + [set_(r, op("subtract", R(b), R(v)))] + restart + res + [
        set_(k, Const(0)), set_(go, op("greater", err, bound))]
    body = dot(rhat, r, rho_new) + [
        set_(beta, op("multiply", op("divide", S(rho_new), safe(S(rho))),
                      op("divide", S(alpha), safe(S(omega))))),
        set_(p, op("add", R(r), op("multiply", S(beta), op("subtract", R(p), op("multiply", S(omega), R(v))))))]
    body += matvec(p, v) + dot(rhat, v, tt) + [
        set_(alpha, op("divide", S(rho_new), safe(S(tt)))),
        set_(s_, op("subtract", R(r), op("multiply", S(alpha), R(v))))]
    body += matvec(s_, t) + dot(t, t, tt) + dot(t, s_, omega) + [
        set_(omega, op("where", op("greater", S(tt), Const(0.0)),
                       op("divide", S(omega), safe(S(tt))), Const(0.0))),
        set_(x, op("add", R(x), op("add", op("multiply", S(alpha), R(p)), op("multiply", S(omega), R(s_))))),
        set_(r, op("subtract", R(s_), op("multiply", S(omega), R(t)))),
        set_(rho, S(rho_new)),
        set_(k, op("add", S(k), Const(1)))] + res + [
        If(op("logical_or", op("equal", S(omega), Const(0.0)), op("equal", S(rho_new), Const(0.0))), restart),
        set_(go, op("logical_and", op("greater", err, bound), op("less", S(k), max_iter)))]
    return init + [While(S(go), body)]


def _iteration(fe, step, xs, x0c, values, tol, max_iter, loc, temp):
    """The forward iteration: statements leaving the fixed point in ``xs``."""
    def body():
        out = fe.to_expr(fe.call(step, [Read(Ref(xs))] + list(values), {}, loc,
                                 getattr(step, "__name__", "step")), loc)
        return fe.materialize(out, "fx_next", loc)
    stmts, new = fe.collect(body)
    return _loop(xs, Read(Ref(x0c)), stmts, new, tol, max_iter, temp)


def _step_program(call, containers):
    wx, wps, outside, stmts, result = call.attrs["step"]
    params = [wx] + list(wps) + list(outside)
    return Program("fixed_step", params, stmts, [result], containers), params


def _setup(call):
    """Statements giving the one-step program's inputs their values at the fixed point."""
    wx, wps, _, _, _ = call.attrs["step"]
    return [Assign(Ref(wx), Read(Ref(call.outputs[0])))] + \
        [Assign(Ref(w), src) for w, src in zip(wps, call.inputs[1:])]


def _register(ctx, containers):
    for c in containers:
        if c.name not in ctx.prog.containers:
            ctx.temps.append(c)


def _vjp_fixed_point(ctx, call, gouts):
    g = gouts[0]
    prog, params = _step_program(call, ctx.prog.containers)
    wx = params[0]
    wrt = [c for c in params if c.dtype.kind == "f"]
    # the iteration needs only J_x^T lam (a gradient program in x alone); the parameters' adjoints
    # J_p^T lam come from one more pass at the converged lam
    in_x, in_all = build_reverse(prog, [wx], ctx.namer), build_reverse(prog, wrt, ctx.namer)
    lam = ctx.temp(g.shape, g.dtype, "lam")
    runs = []
    for gp in (in_x, in_all):
        gp.cotangent.kind = "transient"
        _register(ctx, list(gp.containers.values()))
        # the step's forward sweep at the fixed point once, where its backward sweep pops no tape
        # (and so can run again from the same forward values), else both each time
        once = not any(isinstance(t, (Push, Pop)) for t in walk(gp.forward + gp.backward))
        runs.append((gp.forward if once else [],
                     [Assign(Ref(gp.cotangent), Read(Ref(lam)))] + ([] if once else gp.forward) + gp.backward))
    jx = in_x.grads.get(wx)
    if jx is None:                              # the step does not read x: lam = g
        solve = [Assign(Ref(lam), Read(Ref(g)))]
    elif g.dtype.kind == "c":                   # lam = g + J_x^T lam, iterated
        solve = _loop(lam, Read(Ref(g)), runs[0][1], op("add", Read(Ref(g)), Read(Ref(jx))),
                      call.attrs["tol"], call.attrs["max_iter"], ctx.temp, scale=Read(Ref(g)))
    else:                                       # (I - J_x^T) lam = g, by BiCGSTAB from lam = g
        def matvec(src, dst):
            return [Assign(Ref(lam), Read(Ref(src)))] + runs[0][1] + \
                [Assign(Ref(dst), op("subtract", Read(Ref(src)), Read(Ref(jx))))]
        sol = ctx.temp(g.shape, g.dtype, "ksol")
        solve = [Assign(Ref(sol), Read(Ref(g)))] + \
            _bicgstab(g, sol, matvec, call.attrs["tol"], call.attrs["max_iter"], ctx.temp) + \
            [Assign(Ref(lam), Read(Ref(sol)))]
    stmts = _setup(call) + runs[0][0] + solve + runs[1][0] + runs[1][1]
    sources = dict(zip(params[1:], call.inputs[1:]))
    for c in wrt[1:] if wrt and wrt[0] is wx else wrt:
        gc = in_all.grads.get(c)
        if gc is not None:
            stmts += ctx.accumulate(sources[c], Read(Ref(gc)))
    return distinct(stmts)


def _jvp_fixed_point(ctx, call, touts):
    t_out = touts[0]
    if t_out is None:
        return []
    prog, params = _step_program(call, ctx.prog.containers)
    wrt = [c for c in params if c.dtype.kind == "f"]
    tp = build_tangent(prog, wrt, ctx.namer)
    _register(ctx, [c for c in tp.containers.values()])
    seeds = tp.params[len(params):]
    t = ctx.temp(t_out.shape, t_out.dtype, "tfix")
    sources = dict(zip(params[1:], call.inputs[1:]))
    fixed = []
    for c, seed in zip(wrt, seeds):
        seed.kind = "transient"
        if c is params[0]:
            continue
        tv = ctx.tangent(sources[c])
        fixed.append(Assign(Ref(seed), tv if tv is not None else Const(0.0)))
    x_seed = seeds[0] if wrt and wrt[0] is params[0] else None
    run = ([Assign(Ref(x_seed), Read(Ref(t)))] if x_seed is not None else []) + tp.body
    t_result = tp.results[1]
    # measured against the first iterate, the tangent the parameters give in one step
    first = ctx.temp(t_out.shape, t_out.dtype, "tfirst")
    once = ([Assign(Ref(x_seed), Const(0.0))] if x_seed is not None else []) + tp.body + \
        [Assign(Ref(first), Read(Ref(tp.results[1])))]
    if x_seed is None or t_out.dtype.kind == "c":       # t = J_x t + J_p dp, iterated
        solve = _loop(t, Read(Ref(first)), run, Read(Ref(t_result)), call.attrs["tol"], call.attrs["max_iter"],
                      ctx.temp, scale=Read(Ref(first)))
    else:                                                # (I - J_x) t = J_p dp, by BiCGSTAB from t = J_p dp
        def matvec(src, dst):                            # one tangent step gives J_x src + J_p dp
            return [Assign(Ref(x_seed), Read(Ref(src)))] + tp.body + [Assign(Ref(dst), op(
                "add", op("subtract", Read(Ref(src)), Read(Ref(t_result))), Read(Ref(first))))]
        solve = [Assign(Ref(t), Read(Ref(first)))] + \
            _bicgstab(first, t, matvec, call.attrs["tol"], call.attrs["max_iter"], ctx.temp)
    stmts = _setup(call) + fixed + once + solve
    return distinct(stmts + [Assign(Ref(t_out), Read(Ref(t)))])


# ---------------------------------------------------------------- while loops, opt-in


def implicit_whiles(prog, namer, tol=1e-12, max_iter=10_000):
    """``grad(..., implicit_while=True)``: each top-level ``while`` loop of ``prog`` that iterates
    one float state to a fixed point becomes a ``fixed_point`` call, differentiated implicitly.

    A loop qualifies when the body carries one float container ``x`` from one iteration to the
    next (it reads it before writing it; integer counters may be carried too), its condition
    compares successive iterates (it depends on ``x`` as the body found it and on ``x`` as the
    body leaves it), and no other float value the body writes is read after the loop. Others are
    differentiated through, as without the option. The derivative is then that of the fixed
    point ``x* = body(x*)`` (exact only if the loop converged); ``tol`` and ``max_iter`` bound
    the adjoint's linear solve. Returns the new top-level statements."""
    out = []
    for i, s in enumerate(prog.body):
        call = _as_fixed_point(s, prog, i, namer, tol, max_iter) if isinstance(s, While) else None
        out.extend(call if call is not None else [s])
    return out


def _touches(s):
    """(containers read, containers written) anywhere in statement ``s``."""
    reads, writes = set(), set()
    for t in walk([s]):
        reads |= {r.ref.container for r in stmt_reads(t)}
        writes |= {w.container for w in stmt_writes(t)}
    return reads, writes


def _carried(body):
    """Containers the body reads before it writes them and writes: those one iteration hands
    the next."""
    written, first_read = set(), set()
    for t in walk(body):
        first_read |= {r.ref.container for r in stmt_reads(t)} - written
        written |= {w.container for w in stmt_writes(t)}
    return first_read & written, written


def _compares_iterates(loop, x):
    """Whether the loop's condition depends on ``x`` both as the body found it and as the body
    leaves it: a test on successive iterates, not on the iterate alone. The values the body
    assigns ``x`` from count as the new iterate (what the condition reads of them is not traced
    further back to the old one)."""
    body = loop.body
    touches = [_touches(s) for s in body]
    writes_x = [k for k, (_, w) in enumerate(touches) if x in w]
    first, last = min(writes_x), max(writes_x)
    made = set().union(*(w for _, w in touches))
    update = set().union(*(touches[k][0] for k in writes_x)) & made - {x}
    needed = {r.ref.container for r in iter_reads(loop.cond)}
    new = x in needed
    old = False
    for k in range(len(body) - 1, -1, -1):
        reads, writes = touches[k]
        if not writes & (needed - {x} - update):
            continue
        needed |= reads
        old |= x in reads and k < first
        new |= x in reads and k > last
    return old and (new or bool(update & needed))


def _as_fixed_point(loop, prog, i, namer, tol, max_iter):
    carried, written = _carried(loop.body)
    floats = [c for c in carried if c.dtype.kind in "fc"]
    if len(floats) != 1 or floats[0].dtype.kind != "f" or not _compares_iterates(loop, floats[0]):
        return None
    x = floats[0]
    later = {r.ref.container for t in walk(prog.body[i + 1:]) for r in stmt_reads(t)} | set(prog.results)
    others = sorted(written - {x}, key=lambda c: c.name)
    if any(c.dtype.kind in "fc" and c in later for c in others):
        return None
    containers = prog.containers

    def fresh(c, hint, shape=None):
        n = Container(namer(hint), c.dtype, c.shape if shape is None else shape, "transient")
        containers[n.name] = n
        return n
    xs, wx, xc = fresh(x, "fixed_" + x.name), fresh(x, x.name + "_in"), fresh(x, x.name + "_step")
    clones = {}
    for c in sorted(others, key=lambda c: c.ndim):          # scalars first: shapes may read them
        clones[c] = fresh(c, c.name + "_step", tuple(rename_expr(d, clones) for d in c.shape))
    try:
        forward = [Assign(Ref(xs), Read(Ref(x)))] + rename([loop], {x: xs})
        stmts = [Assign(Ref(xc), Read(Ref(wx)))] + \
            [Assign(Ref(clones[c]), Read(Ref(c))) for c in sorted(carried - {x}, key=lambda c: c.name)] + \
            rename(loop.body, {x: xc, **clones})
    except ValueError:
        return None
    made = {wx, xc, *clones.values()}
    outside = sorted({r.ref.container for t in walk(stmts) for r in stmt_reads(t)} - made, key=lambda c: c.name)
    attrs = {"forward": forward, "step": (wx, [], outside, stmts, xc), "tol": Const(float(tol)),
             "max_iter": Const(int(max_iter))}
    call = Call("fixed_point", [Read(Ref(x))] + [Read(Ref(c)) for c in outside], [xs] + others, attrs, loc=loop.loc)
    return [call, Assign(Ref(x), Read(Ref(xs)))]


IMPLICIT_CALLS = {
    "fixed_point": CallRule(lambda i, a: "None", _vjp_fixed_point, jvp=_jvp_fixed_point,
                            expand=lambda call: call.attrs["forward"],
                            flops=lambda call, size: 0,
                            doc="x = step(x, *params) to convergence (flowgrad.fixed_point): derivatives at the "
                                "fixed point, implicitly"),
}
IMPLICIT_LOWERING = {}

fixed_point._flowgrad_inline = inline_fixed_point

__all__ = ["fixed_point", "implicit_whiles", "IMPLICIT_CALLS", "IMPLICIT_LOWERING"]
