"""Gradients of many simulations at once on Dask: sweeps, ensembles and chunked arrays.

``map_value_and_grad`` runs one ``value_and_grad`` per set of arguments (a parameter sweep, a
batch of independent runs); ``ensemble_value_and_grad`` gives the value and gradient of the sum
or mean over members of ``fn(*member_args, *shared)`` (an ensemble sharing its parameters, as in
data assimilation and uncertainty quantification), summing the members' gradients on the cluster
by a pairwise tree; ``chunked_value_and_grad`` does the same over the blocks of a ``dask.array``
split along a member or column axis, its gradient a dask array with the same chunks.

Where the work runs: on the ``distributed.Client`` given, else on the default client (the last
one made in this process, ``distributed.default_client()``), else in this process with Dask's
synchronous scheduler, one call after another (the same results, no parallelism: start a
``Client`` for that). The chunked variant returns lazy dask arrays, computed by whatever
scheduler ``dask.compute`` uses then.

What travels to a worker is the transform (the function by reference, and the options) and the
arguments. flowgrad reads ``fn``'s source where it runs: ``fn`` defined in a module must be
importable on the workers; one defined in a script run as ``__main__`` or in a notebook cell
travels by value, its source lines with it (``_job``). Each worker process captures and
compiles ``fn`` once per signature and keeps it between tasks and between calls; the native
backend's machine code is found in the on-disk cache (``FLOWGRAD_CACHE_DIR``, best shared by the
workers of one machine), which holds code, never arguments. Calls of native code run one at a
time in a process (its loops run on all the process's threads already, and Numba's default
threading layer refuses concurrent parallel regions): give workers one thread each
(``LocalCluster(threads_per_worker=1)``) and as many processes as cores.

The sums are the same pairwise tree, in the same order, wherever they run: a result does not
depend on which worker ran which member, and a rerun (after a worker died, say) equals the first
run bit for bit.
"""
from __future__ import annotations

import hashlib
import inspect
import linecache
import numbers
import operator
import threading
from collections import OrderedDict

import numpy as np

try:
    import cloudpickle
    import dask
    import dask.array as da
except ImportError as exc:       # pragma: no cover - depends on the environment
    raise ImportError(f'flowgrad.dask needs dask and distributed ({exc}): pip install "flowgrad[dask]"') from None
try:
    from distributed import Future, default_client
except ImportError:              # pragma: no cover - dask without distributed: this process only
    Future, default_client = (), None

from . import pytree
from .api import value_and_grad
from .errors import InputError

REDUCTIONS = ("sum", "mean")
TRANSFORM_OPTIONS = ("memory_budget", "strategy", "allow_uncompute", "implicit_while")


# ---------------------------------------------------------------- the public functions


def map_value_and_grad(fn, batch_of_args, client=None, wrt=0, backend=None, gather=True, **transform_options):
    """``flowgrad.value_and_grad(fn, wrt=wrt, ...)`` called once per element of ``batch_of_args``,
    each call a Dask task.

    Args:
      fn: a function flowgrad differentiates (returning a float scalar), importable on the
        workers, or a program object (``from_torch``, ``from_onnx``, ``from_fortran``).
      batch_of_args: a sequence of argument tuples, one per call: ``[(x0, 0.1), (x1, 0.2)]``.
        An argument may also be a Dask ``Delayed`` or ``Future`` (data already on the cluster).
      client: a ``distributed.Client``; default: the default client if one exists, else this
        process (Dask's synchronous scheduler).
      wrt: as for ``value_and_grad``: an argument name or position, or a tuple of them.
      backend: ``"native"`` or ``"numpy"``, as for ``value_and_grad``.
      gather: return the results (True) or the Dask futures, one per call (False; needs a
        client).
      **transform_options: ``memory_budget``, ``strategy``, ``allow_uncompute``,
        ``implicit_while``, as for ``value_and_grad``.

    Returns:
      A list with one ``(value, grads)`` per element of ``batch_of_args``, in its order
      (``grads`` as ``value_and_grad`` gives them), or the list of futures of those pairs.

    Example:
      >>> from distributed import Client                                  # doctest: +SKIP
      >>> client = Client(n_workers=2, threads_per_worker=1)              # doctest: +SKIP
      >>> out = flowgrad.dask.map_value_and_grad(heat, [(u, k, 100) for k in (0.1, 0.2)],
      ...                                        wrt="kappa")             # doctest: +SKIP
      >>> [gk for _, gk in out]                                           # doctest: +SKIP
    """
    vg = _transform(fn, wrt, backend, transform_options, "map_value_and_grad")
    batch = _argument_tuples(batch_of_args, "batch_of_args", "[(x0, theta), (x1, theta)]")
    for k, args in enumerate(batch):
        _check_call(vg, args, f"batch_of_args[{k}]")
    job = _job(vg)
    run = dask.delayed(_value_and_grad_task, pure=False)
    return _compute([run(job, vg, *args) for args in batch], client, gather, "map_value_and_grad")


def ensemble_value_and_grad(fn, members, shared=(), client=None, wrt=None, reduce="sum", backend=None,
                            gather=True, **transform_options):
    """The value and gradient of ``F = sum (or mean) over members k of fn(*members[k], *shared)``,
    the members' gradients summed on the cluster by a pairwise tree of tasks.

    Args:
      fn: a function flowgrad differentiates (returning a float scalar), importable on the
        workers. It takes each member's arguments first, then the shared ones.
      members: a sequence of argument tuples, one per member, all of the same length:
        ``[(obs0,), (obs1,)]``. Arrays given here travel in the task graph (Dask warns about a
        large graph); an argument may instead be a Dask ``Delayed`` or a ``Future``
        (``client.scatter``), data already on the cluster.
      shared: a tuple of the arguments every member shares (parameters, step counts), after
        the member's: ``(theta, 100)``. Each is sent to a worker once, not once per member.
      client: a ``distributed.Client``; default: the default client if one exists, else this
        process (Dask's synchronous scheduler).
      wrt: which arguments of ``fn`` to differentiate, by name or by position in ``fn``'s
        signature (member arguments first, then shared ones): one, or a tuple of them. A shared
        argument's gradient is that of ``F``: summed (or averaged) over the members. A member
        argument's gradient is a list, one per member, the gradient of ``F`` with respect to
        that member's argument (each member's own gradient, divided by the count for
        ``"mean"``). Default: every shared argument that is or holds floats, as a tuple.
      reduce: ``"sum"`` or ``"mean"`` over the members.
      backend: ``"native"`` or ``"numpy"``, as for ``value_and_grad``.
      gather: return the result (True) or its Dask future (False; needs a client).
      **transform_options: ``memory_budget``, ``strategy``, ``allow_uncompute``,
        ``implicit_while``, as for ``value_and_grad``.

    Returns:
      ``(value, grads)``: ``value`` the float ``F``; ``grads`` one entry for a single ``wrt``, a
      tuple for a tuple (or the default).

    Example:
      >>> value, (g_theta,) = flowgrad.dask.ensemble_value_and_grad(
      ...     misfit, [(obs,) for obs in observations], shared=(theta, 50),
      ...     reduce="mean")                                              # doctest: +SKIP
    """
    if reduce not in REDUCTIONS:
        raise InputError(f"reduce must be 'sum' or 'mean', not {reduce!r}")
    members = _argument_tuples(members, "members", "[(obs0,), (obs1,)]")
    if not members:
        raise InputError("ensemble_value_and_grad needs at least one member; members is empty")
    count = len(members[0])
    for k, m in enumerate(members):
        if len(m) != count:
            raise InputError(f"members[{k}] has {len(m)} arguments but members[0] has {count}: every member "
                             "passes the same arguments, its own values")
    if not isinstance(shared, (tuple, list)):
        raise InputError(f"shared must be a tuple of arguments, not a {type(shared).__name__}: pass "
                         "shared=(theta,) for one shared argument")
    shared = tuple(shared)
    options = dict(transform_options)
    if wrt is None:
        wrt = tuple(count + j for j, v in enumerate(shared) if _holds_floats(v))
        if not wrt:
            raise InputError("ensemble_value_and_grad: no shared argument holds floats to differentiate; "
                             "pass wrt= naming the arguments (member arguments come first, then shared ones)")
        single = False
    else:
        single = not isinstance(wrt, (tuple, list))
    vg = _transform(fn, (wrt,) if single else tuple(wrt), backend, options, "ensemble_value_and_grad")
    for k, m in enumerate(members):
        _check_call(vg, tuple(m) + shared, f"member {k}")
    names = vg.resolve_wrt()[0]
    kinds = ["member" if n in vg.params[:count] else "shared" for n in names]
    job = _job(vg)
    shared = tuple(dask.delayed(v) if _sizeable(v) else v for v in shared)   # one copy in the graph
    run = dask.delayed(_member_task, pure=False, nout=2)
    parts = [run(job, vg, kinds, *m, *shared) for m in members]
    total = _tree([p[0] for p in parts])
    mine = [p[1] for p in parts] if "member" in kinds else []
    result = dask.delayed(_ensemble_result, pure=False)(total, mine, kinds, len(members), reduce, single)
    return _compute(result, client, gather, "ensemble_value_and_grad")


def chunked_value_and_grad(fn, x, *args, axis=0, wrt=0, backend=None, **transform_options):
    """The value and gradient of ``F = sum over the blocks x_k of x along axis of fn(x_k, *args)``,
    lazily, for a ``dask.array`` split along a member or column axis.

    Each block is one task: ``fn`` sees a NumPy block (all of ``x`` along the other axes) and
    returns a float scalar (for a mean over the members, divide by ``x.shape[axis]`` in ``fn``).
    The blocks' gradients of shared arguments are summed by a pairwise tree of tasks.

    Args:
      fn: a function flowgrad differentiates, importable on the workers: ``fn(block, *args)``.
      x: a ``dask.array.Array`` chunked along ``axis`` only.
      *args: the arguments every block shares (arrays, numbers).
      axis: the axis ``x`` is split along.
      wrt: by name or position in ``fn``'s signature, one or a tuple: position 0 is ``x``, whose
        gradient is a dask array with ``x``'s shape and chunks; another argument's gradient is
        the sum over the blocks, a dask array of its shape (0-d for a float).
      backend: ``"native"`` or ``"numpy"``, as for ``value_and_grad``.
      **transform_options: ``memory_budget``, ``strategy``, ``allow_uncompute``,
        ``implicit_while``, as for ``value_and_grad``.

    Returns:
      ``(value, grads)``, dask arrays computed by ``dask.compute`` (on the default
      ``distributed`` client if there is one): ``value`` 0-d float64, ``grads`` one for a single
      ``wrt``, a tuple for a tuple.

    Example:
      >>> x = dask.array.from_array(columns, chunks=(64, -1))             # doctest: +SKIP
      >>> value, gx = flowgrad.dask.chunked_value_and_grad(physics, x)    # doctest: +SKIP
      >>> value, gx = dask.compute(value, gx)                             # doctest: +SKIP
    """
    if not isinstance(x, da.Array):
        raise InputError(f"chunked_value_and_grad takes a dask array, not a {type(x).__name__}: pass "
                         "dask.array.from_array(x, chunks=...) chunked along the member axis")
    if not isinstance(axis, (int, np.integer)) or not -x.ndim <= axis < max(x.ndim, 1):
        raise InputError(f"axis {axis!r} is not an axis of x (shape {x.shape})")
    if x.ndim == 0:
        raise InputError("chunked_value_and_grad takes a dask array with at least one axis to split")
    axis = int(axis) % x.ndim
    split = [i for i in range(x.ndim) if i != axis and x.numblocks[i] > 1]
    if split:
        raise InputError(f"x is chunked along axis {split[0]} too (chunks {x.chunks}); each block must hold all "
                         f"of x along the axes other than {axis}: x = x.rechunk({{{split[0]}: -1}})")
    single = not isinstance(wrt, (tuple, list))
    vg = _transform(fn, (wrt,) if single else tuple(wrt), backend, transform_options, "chunked_value_and_grad")
    first = np.broadcast_to(np.zeros((), dtype=x.dtype), tuple(c[0] for c in x.chunks))
    _check_call(vg, (first,) + args, "the first block")
    names = vg.resolve_wrt()[0]
    for n in names:
        if n == vg.params[0]:
            continue
        if n not in vg.params[1:len(args) + 1]:
            raise InputError(f"wrt argument {n!r} of chunked_value_and_grad takes its default value: pass it in "
                             "*args to differentiate it")
        value = dict(zip(vg.params[1:], args))[n]
        if not isinstance(value, (np.ndarray, numbers.Real)):
            raise InputError(f"chunked_value_and_grad differentiates arrays and floats; wrt argument {n!r} is a "
                             f"{type(value).__name__}: use ensemble_value_and_grad for pytree arguments")
    kinds = ["member" if n == vg.params[0] else "shared" for n in names]
    job = _job(vg)
    shared = tuple(dask.delayed(v) if _sizeable(v) else v for v in args)
    run = dask.delayed(_member_task, pure=False, nout=2)
    blocks = x.to_delayed().reshape(-1)
    parts = [run(job, vg, kinds, b, *shared) for b in blocks]
    total = _tree([p[0] for p in parts])
    grads, given = [], dict(zip(vg.params[1:], args))
    for n, kind in zip(names, kinds):
        k = kinds[:len(grads)].count(kind)          # its place among the member or the shared gradients
        if kind == "member":
            pieces = []
            for j, p in enumerate(parts):
                shape = tuple(c[j] if i == axis else c[0] for i, c in enumerate(x.chunks))
                pieces.append(da.from_delayed(dask.delayed(operator.getitem)(p[1], k), shape=shape, dtype=x.dtype))
            grads.append(da.concatenate(pieces, axis=axis))
        else:
            v = given[n]
            dtype = v.dtype if isinstance(v, np.ndarray) else np.float64
            grads.append(da.from_delayed(dask.delayed(_shared_grad)(total, k), shape=np.shape(v), dtype=dtype))
    value = da.from_delayed(dask.delayed(_value_of)(total), shape=(), dtype=np.float64)
    return value, grads[0] if single else tuple(grads)


# ---------------------------------------------------------------- checks


def _transform(fn, wrt, backend, options, where):
    unknown = sorted(set(options) - set(TRANSFORM_OPTIONS))
    if unknown:
        raise InputError(f"{where} got unknown option {unknown[0]!r}; the transform options are: "
                         f"{', '.join(TRANSFORM_OPTIONS)}")
    return value_and_grad(fn, wrt=wrt, backend=backend, **options)


def _argument_tuples(batch, name, example):
    if isinstance(batch, (np.ndarray, da.Array, str, bytes, dict)) or not hasattr(batch, "__iter__"):
        raise InputError(f"{name} must be a list of argument tuples, one per call, like {example}; got a "
                         f"{type(batch).__name__}")
    batch = list(batch)
    for k, args in enumerate(batch):
        if not isinstance(args, (tuple, list)):
            raise InputError(f"{name}[{k}] is a {type(args).__name__}, not a tuple of arguments: pass one tuple "
                             f"per call, like {example} ([(x,) for x in xs] for one argument)")
    return [tuple(args) for args in batch]


def _is_lazy(v):
    return dask.is_dask_collection(v) or isinstance(v, Future)


def _check_call(vg, args, what):
    """An InputError now, not on a worker, for a call with the wrong arguments."""
    try:
        vg.bind(args)
    except InputError as exc:
        raise InputError(f"{what}: {exc}") from None
    if not any(_is_lazy(a) for a in args):
        try:
            vg.wrt_names(args)
        except InputError as exc:
            raise InputError(f"{what}: {exc}") from None


def _holds_floats(v):
    if isinstance(v, (bool, np.bool_)):
        return False
    if isinstance(v, (float, np.floating, complex, np.complexfloating)):
        return True
    if isinstance(v, np.ndarray):
        return v.dtype.kind in "fc"
    if _is_lazy(v):
        return True
    if pytree.is_node(v, objects=True):
        return any(_holds_floats(x) for x in pytree.flatten(v, objects=True)[0])
    return False


def _sizeable(v):
    """Whether ``v`` is worth one key of its own in the graph (rather than a copy in every task)."""
    return not _is_lazy(v) and not isinstance(v, (numbers.Number, str, bytes, type(None)))


def _job(vg):
    """What names the transform in every process: ``(token, sources)``. The token is its pickled
    form's hash (the function by reference, the options; a program object's parameters as they are
    now). ``sources`` gives the file and source lines of each function pickled by value (defined
    in a script run as ``__main__`` or in a notebook cell): cloudpickle sends its code without
    the file's name, and flowgrad captures functions from their source."""
    return hashlib.sha256(cloudpickle.dumps(vg)).hexdigest(), _main_sources(vg.fn)


def _functions(fn):
    """``fn`` and the functions it reads as globals, and theirs (the helpers it calls)."""
    todo, seen = [fn], []
    while todo:
        f = todo.pop()
        if inspect.isfunction(f) and all(f is not g for g in seen):
            seen.append(f)
            todo += [f.__globals__.get(name) for name in f.__code__.co_names]
    return seen


def _main_sources(fn):
    sources = {}
    for f in _functions(fn):
        if f.__module__ in ("__main__", "__mp_main__"):
            lines = linecache.getlines(f.__code__.co_filename)
            if lines:
                sources[(f.__name__, f.__code__.co_firstlineno)] = (f.__code__.co_filename, lines)
    return sources


def _restore_sources(fn, sources):
    """Give functions pickled by value their file's name back, its lines in ``linecache`` (an
    entry never checked against a file), so that flowgrad finds their source here."""
    for f in _functions(fn):
        where = sources.get((f.__name__, f.__code__.co_firstlineno))
        if where is not None and f.__code__.co_filename != where[0]:
            name, lines = where
            if linecache.getlines(name) != lines:
                linecache.cache[name] = (sum(map(len, lines)), None, lines, name)
            f.__code__ = f.__code__.replace(co_filename=name)


# ---------------------------------------------------------------- running


def _client(client, where):
    if client is not None:
        if not hasattr(client, "compute") or not hasattr(client, "gather"):
            raise InputError(f"{where}: client must be a distributed.Client, not a {type(client).__name__}")
        return client
    if default_client is None:
        return None
    try:
        return default_client()
    except ValueError:          # no client made in this process
        return None


def _compute(work, client, gather, where):
    client = _client(client, where)
    if client is None:
        if not gather:
            raise InputError(f"{where}(gather=False) returns Dask futures, which need a distributed client: "
                             "start one (distributed.Client()) or pass client=")
        return dask.compute(work, scheduler="sync")[0]
    futures = client.compute(work)
    return client.gather(futures) if gather else futures


_LIVE = OrderedDict()           # token -> the transform this process compiled, most recent last
_LIVE_KEEP = 16
_LIVE_LOCK = threading.Lock()
_NATIVE_LOCK = threading.Lock()


def _live(job, vg):
    """The transform named by ``job`` that this process already holds (with what it compiled),
    else ``vg``, kept for the next task."""
    token, sources = job
    with _LIVE_LOCK:
        if token not in _LIVE and sources:
            _restore_sources(vg.fn, sources)
        vg = _LIVE.pop(token, vg)
        _LIVE[token] = vg
        while len(_LIVE) > _LIVE_KEEP:
            _LIVE.popitem(last=False)
    return vg


def _value_and_grad_task(job, vg, *args):
    vg = _live(job, vg)
    if vg.backend == "native":
        with _NATIVE_LOCK:
            return vg(*args)
    return vg(*args)


def _member_task(job, vg, kinds, *args):
    """``((value, shared gradients), member gradients)`` of one member (or block)."""
    value, grads = _value_and_grad_task(job, vg, *args)
    return ((value, tuple(g for g, k in zip(grads, kinds) if k == "shared")),
            tuple(g for g, k in zip(grads, kinds) if k == "member"))


def _tree(parts):
    """The sum of ``parts`` (``(value, gradients)`` Delayed), pairwise: each task adds two."""
    add = dask.delayed(_add, pure=False)
    while len(parts) > 1:
        parts = [add(parts[k], parts[k + 1]) for k in range(0, len(parts) - 1, 2)] + \
            (parts[-1:] if len(parts) % 2 else [])
    return parts[0]


def _add(a, b):
    return a[0] + b[0], tuple(_tree_map(operator.add, x, y) for x, y in zip(a[1], b[1]))


def _tree_map(f, a, b=None):
    """``f`` applied leaf by leaf to a gradient (an array, a number or a pytree of them), numeric
    leaves only (a pytree's static leaves stay as they are)."""
    if not pytree.is_node(a, objects=True):
        return f(a) if b is None else f(a, b)
    leaves, tree = pytree.flatten(a, objects=True)
    other = pytree.flatten(b, objects=True)[0] if b is not None else [None] * len(leaves)
    return tree.unflatten([(f(x) if y is None else f(x, y)) if _numeric(x) else x for x, y in zip(leaves, other)])


def _numeric(v):
    return isinstance(v, (np.ndarray, numbers.Number)) and not isinstance(v, (bool, np.bool_))


def _scaled(g, n):
    return _tree_map(lambda v: v / n, g)


def _ensemble_result(total, mine, kinds, n, reduce, single):
    value, shared = total
    if reduce == "mean":
        value, shared = value / n, tuple(_scaled(g, n) for g in shared)
    shared, out = iter(shared), []
    for k, kind in enumerate(kinds):
        if kind == "shared":
            out.append(next(shared))
        else:
            j = kinds[:k].count("member")
            out.append([_scaled(m[j], n) if reduce == "mean" else m[j] for m in mine])
    return float(value), out[0] if single else tuple(out)


def _value_of(total):
    return np.float64(total[0])


def _shared_grad(total, k):
    return np.asarray(total[1][k])


__all__ = ["map_value_and_grad", "ensemble_value_and_grad", "chunked_value_and_grad"]
