"""Public API: ``grad``, ``value_and_grad``, ``vjp`` and ``jit``.

A function is captured from its source on the first call with a given signature (array
shapes and dtypes; the kinds of scalar arguments), compiled once, and cached. Scalar
numbers are run-time values: a new step count or coefficient reuses the compiled program.
"""
from __future__ import annotations

import inspect
import os
import pickle

import numpy as np

from . import api_nested, pytree
from .autodiff.batch import batch_tangent
from .autodiff.forward import build_tangent
from . import pipeline
from .autodiff.reverse import build_reverse
from .checkpoint.plan import Chosen, parse_bytes, plan_program
from .checkpoint.schedules import STORE_ALL
from .checkpoint.values import recompute as recompute_values
from .backends import native as native_backend
from .backends import native_kernel, native_runtime
from .backends import numpy as numpy_backend
from .errors import FlowgradError, InputError, UnsupportedError
from .frontends.python import capture
from .implicit import implicit_whiles
from .ir.core import I64, Assign, Const, Container, Program, Ref
from .ir.printer import block_lines, program_text
from .ir.verify import verify

BACKENDS = ("numpy", "native") if native_backend.available() else ("numpy",)
DEFAULT_BACKEND = "native" if "native" in BACKENDS else "numpy"
# the tangent programs: mode -> (of the gradient program: forward over reverse, many directions at once)
TANGENT_MODES = {"jvp": (False, False), "hvp": (True, False), "jvp_dirs": (False, True), "hvp_dirs": (True, True)}


def _arg_key(value, name, objects=False):
    """How an argument takes part in the signature a capture is cached under."""
    if type(value) is np.ndarray and value.dtype.kind in "biufc":
        return ("array", value.shape, value.dtype)              # the common cases first
    if type(value) is float:
        return ("float", "f8")
    if pytree.is_node(value, objects):
        leaves, tree = pytree.flatten(value, objects=objects)
        return ("tree", tree.key(), tuple(_arg_key(v, p) for v, p in zip(leaves, tree.paths(name))))
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biufc":
            raise InputError(f"argument {name!r} has dtype {value.dtype}; flowgrad differentiates numeric "
                             "arrays (float, complex, int, bool dtypes)")
        return ("array", value.shape, value.dtype)
    if isinstance(value, (bool, np.bool_)):
        return ("bool", bool(value))
    if isinstance(value, (int, np.integer)):
        return ("int", isinstance(value, np.integer))          # a Python int is weak in promotion
    if isinstance(value, (float, np.floating)):
        return ("float", np.dtype(type(value)).str if isinstance(value, np.floating) else "f8")
    if isinstance(value, (complex, np.complexfloating)):
        return ("complex", np.dtype(type(value)).str if isinstance(value, np.complexfloating) else "c16")
    try:
        hash(value)
        return ("object", value)
    except TypeError:
        return ("object-id", id(value))


def _is_float_leaf(v):
    """A leaf that carries a derivative: a float or complex number or array."""
    return isinstance(v, (float, np.floating, complex, np.complexfloating)) or \
        isinstance(v, np.ndarray) and v.dtype.kind in "fc"


def _wrt_containers(cap, wrt_spec):
    """``(wrt, wrt_layout)``: the argument containers ``wrt_spec`` names and, per entry, which of
    them a pytree argument's float leaves are (None for a plain argument)."""
    # which of the gradients each wrt argument gets: one, or one per float leaf of a pytree
    wrt, wrt_layout = [], []
    for w in wrt_spec:
        leaves = cap.arg_leaves.get(w)
        if leaves is not None:
            picks = [(k, c) for k, c in enumerate(leaves[1]) if c.dtype.kind in "fc"]
            if not picks:
                raise InputError(f"wrt argument {w!r} holds no float arrays or floats to differentiate")
            wrt_layout.append([(k, len(wrt) + j) for j, (k, _) in enumerate(picks)])
            wrt += [c for _, c in picks]
            continue
        c = cap.arg_containers.get(w)
        if c is None:
            raise InputError(f"wrt argument {w!r} is not a float array or scalar argument")
        if c.dtype.kind not in "fc":
            raise InputError(f"wrt argument {w!r} has dtype {c.dtype}; only float and complex arguments can "
                             "be differentiated")
        wrt_layout.append(None)
        wrt.append(c)
    return wrt, wrt_layout


def _gradient_program(prog, wrt, namer):
    """``(program, cotangent)``: the gradient program of ``prog``'s scalar result in ``wrt[0]``,
    its forward sweep (with the tapes) and backward sweep as one body, taking the cotangent as its
    last parameter and returning the gradient (zero where the result does not depend on it)."""
    gp = build_reverse(prog, wrt, namer)
    grad = gp.grads.get(wrt[0])
    if grad is None:
        grad = Container(namer("g_" + wrt[0].name), wrt[0].dtype, wrt[0].shape)
        gp.backward = gp.backward + [Assign(Ref(grad), Const(0.0))]
        gp.containers[grad.name] = grad
    return Program(prog.name + "_grad", list(prog.params) + [gp.cotangent], gp.forward + gp.backward,
                   [grad], gp.containers), gp.cotangent


def _program_key(cap, backend, mode, wrt_spec, options):
    """The key native code's generated source is kept on disk under (``native_kernel.load_program``):
    the captured program in full (every statement with the user's line it came from, the containers,
    the names already taken), the mode and its options, and the settings code generation reads; None
    where it is not kept (the NumPy backend, ``FLOWGRAD_DUMP`` asking to see the passes run, a
    program holding an object that does not pickle)."""
    if backend != "native" or os.environ.get("FLOWGRAD_DUMP"):
        return None
    loop_kinds, uncompute, implicit_while, recompute = options
    namer = getattr(cap.namer, "used", cap.namer)
    try:
        data = pickle.dumps((cap.name, cap.params, cap.body, cap.result, cap.containers,
                             sorted(namer.items()) if isinstance(namer, dict) else namer, cap.arg_leaves,
                             mode, tuple(wrt_spec), sorted((loop_kinds or {}).items()), bool(uncompute),
                             bool(implicit_while), recompute, os.environ.get("FLOWGRAD_PARALLEL", ""),
                             native_runtime.threads()), protocol=4)
    except Exception:               # noqa: BLE001 - not kept, generated every time
        return None
    return native_kernel.program_key(data)


class _Compiled:
    """One captured and compiled specialisation.

    Native code's generated source is kept on disk by the captured program (``_program_key``): a
    new process that captures the same program with the same options takes it from there, skipping
    the passes and the code generation (measured 0.03-0.8 s per corpus kernel), and lowers the IR
    (``prog``, ``gp``, ``tangent_prog``) only when something asks for it (a memory plan, ``ir()``)."""

    _LAZY = ("prog", "gp", "tangent_prog", "backward_text", "cotangent", "ckpt_params")

    def __init__(self, fn, args, wrt_spec, backend, mode, loop_kinds=None, uncompute=False, implicit_while=False,
                 recompute=()):
        if backend == "native":
            native_kernel.warm_up()
        cap = fn._flowgrad_capture(args) if hasattr(fn, "_flowgrad_capture") else \
            capture(fn, args, object_args=wrt_spec)
        self.layout = cap.result_layout
        self.cap = cap
        self.result = cap.result
        self.mode = mode
        self.backend = backend
        self.kernel = None          # native: the compiled function with its workspace
        self.options = (loop_kinds, uncompute, implicit_while, recompute)
        self.ckpt_vars = sorted(loop_kinds or {})
        self._zero_d = None         # the positions of the inputs that are 0-d arrays (``call_args``)
        self._int_slots = None      # the positions of the 0-d inputs, and whether integer (``plan_ints``)
        key = None if hasattr(fn, "_flowgrad_capture") else _program_key(cap, backend, mode, wrt_spec, self.options)
        self.program_key = key      # where its generated source is kept on disk (None: not kept)
        stored = native_kernel.load_program(key) if key else None
        if mode != "forward":
            self._resolve_wrt(cap, wrt_spec)
        if stored is not None:
            self.src, fname = stored["src"], stored["name"]
            cotangent = stored.get("cotangent")
            if cotangent is not None:
                cotangent = Container("cotangent", cotangent[0], cotangent[1])
            self._pending = True            # the IR is lowered on first use (``__getattr__``)
        else:
            self._lower()
            self.src, fname = self._emit()
            cotangent = self.gp.cotangent if mode not in TANGENT_MODES and mode != "forward" else None
            if key:
                shape = None if cotangent is None else [int(d.value) if isinstance(d, Const) else None
                                                        for d in cotangent.shape]
                if shape is None or None not in shape:
                    native_kernel.store_program(key, {"src": self.src, "name": fname, "cotangent": None if shape is
                                                       None else [cotangent.dtype.str, shape]})
        rest = (fn, args, wrt_spec, mode, *self.options)
        if backend == "native":
            self.kernel = native_backend.compile_source(self.src, fname)
            native = self.kernel if cotangent is None else _native_vjp(self.kernel, cotangent)
            self.func = self._tiered(native, *rest)
        else:
            label = fname if mode in TANGENT_MODES else cap.name
            self.func = numpy_backend.compile_source(self.src, fname, f"<flowgrad {label}>")

    def __getattr__(self, name):
        # the IR of a program whose source came from the disk cache, lowered when first asked for
        if name in _Compiled._LAZY and self.__dict__.get("_pending"):
            self._pending = False
            self._lower()
            self._emit()            # as when the source was generated (the backend may annotate the IR)
            return getattr(self, name)
        raise AttributeError(name)

    def _lower(self):
        """The captured program through the passes of its mode: ``prog`` (and ``gp``, the gradient
        program, or ``tangent_prog``)."""
        cap, backend, mode = self.cap, self.backend, self.mode
        loop_kinds, uncompute, implicit_while, recompute = self.options
        containers = cap.containers
        if getattr(cap, "lowered", False):      # a gradient program (``grad._flowgrad_capture``)
            body = cap.body
        else:
            unit = pipeline.run(pipeline.CAPTURED, pipeline.Unit({"body": cap.body}, containers, cap.namer,
                                                                 [cap.result], backend, mode))
            body = unit.sweeps["body"]
        self.prog = Program(cap.name, cap.params, body, [cap.result], cap.containers)
        self.ckpt_params = {}
        for var in self.ckpt_vars:
            c = Container(cap.namer("ckpt_" + var), I64, (), "arg")
            self.ckpt_params[var] = c
            self.prog.params.append(c)
            self.prog.containers[c.name] = c
        loop_plan = {var: (kind, self.ckpt_params[var]) for var, kind in (loop_kinds or {}).items()}
        if implicit_while and mode != "forward":
            self.prog.body = implicit_whiles(self.prog, cap.namer)
        verify(self.prog.body, self.prog.containers)
        self.backward_text = ""
        if mode == "forward":
            unit = pipeline.run(pipeline.FORWARD, pipeline.Unit({"body": self.prog.body}, containers, cap.namer,
                                                                [cap.result], backend, mode))
            self.prog.body = unit.sweeps["body"]
            return
        if mode in TANGENT_MODES:
            self._lower_tangent(cap, backend, mode)
            return
        self.gp = build_reverse(self.prog, self.wrt, cap.namer, loop_plan, uncompute)
        gp = self.gp
        outputs = [cap.result] + [gp.grads[w] for w in self.wrt if w in gp.grads]
        unit = pipeline.run(pipeline.REVERSE, pipeline.Unit({"forward": gp.forward, "backward": gp.backward},
                                                            gp.containers, cap.namer, outputs, backend, mode,
                                                            gp.forward_containers))
        gp.forward, gp.backward = unit.sweeps["forward"], unit.sweeps["backward"]
        if recompute:                   # the plan's values evaluated again where the backward sweep reads them
            recompute_values(gp, recompute, cap.namer)
            verify(gp.forward + gp.backward, gp.containers)
        self.backward_text = "\n".join(block_lines(self.gp.backward, "  "))

    def _emit(self):
        """``(source, name of its function)`` of the lowered program for the backend."""
        native = self.backend == "native"
        if self.mode == "forward":
            emit = native_backend.emit_forward if native else numpy_backend.emit_forward
            return emit(self.prog), self.cap.name
        if self.mode in TANGENT_MODES:
            tp = self.tangent_prog
            emit = native_backend.emit_forward if native else numpy_backend.emit_forward
            return emit(tp), tp.name
        if native:
            return native_backend.emit_grad(self.prog, self.gp, self.wrt), self.cap.name + "_grad"
        return numpy_backend.emit_vjp(self.prog, self.gp, self.wrt), self.cap.name + "_vjp"

    def _tiered(self, native, *numpy_args):
        """``native`` run by the NumPy backend's program of the same function while its machine
        code compiles in another process (``_Tiered``); just ``native`` with ``FLOWGRAD_TIERED=0``."""
        if not native_backend.tiered():
            return native
        self.kernel.deferrable = True
        fn, args, wrt_spec, mode, *rest = numpy_args
        return _Tiered(native, self.kernel, lambda: _Compiled(fn, args, wrt_spec, "numpy", mode, *rest).func)

    def _resolve_wrt(self, cap, wrt_spec):
        self.wrt, self.wrt_layout = _wrt_containers(cap, wrt_spec)

    def _lower_tangent(self, cap, backend, mode):
        """The tangent program (``jvp``: of the function; ``hvp``: of its gradient, forward over
        reverse; ``_dirs``: over many directions at once), through the forward pipeline's late
        passes."""
        prog = self.prog
        over_reverse, batched = TANGENT_MODES[mode]
        if over_reverse:
            prog, self.cotangent = _gradient_program(prog, self.wrt, cap.namer)
        tp = build_tangent(prog, self.wrt, cap.namer)
        if batched:
            tp = batch_tangent(tp, len(self.wrt), cap.namer)
        unit = pipeline.run(pipeline.TANGENT, pipeline.Unit({"body": tp.body}, tp.containers, cap.namer,
                                                            tp.results, backend, mode))
        tp.body = unit.sweeps["body"]
        self.tangent_prog = tp

    def call_args(self, args, ckpt_values=None):
        """Values for the generated function's parameters (checkpoint parameters last)."""
        # a 0-d array goes in as its element (Numba types it as an array, which an index cannot be);
        # which inputs are is part of the signature this program was made for
        values = self.cap.inputs(args)
        if self._zero_d is None:
            self._zero_d = [k for k, v in enumerate(values) if isinstance(v, np.ndarray) and v.ndim == 0]
        for k in self._zero_d:
            values[k] = values[k][()]
        if self.ckpt_vars:
            values += [int((ckpt_values or {})[v]) for v in self.ckpt_vars]
        return values

    def plan_ints(self, args):
        """The integer scalar arguments (trip counts, sizes) a memory plan depends on."""
        if self._int_slots is None:
            self._int_slots = [(k, c.dtype.kind in "iu") for k, c in enumerate(self.cap.params) if c.ndim == 0]
        values = self.cap.inputs(args)
        ints = []
        for k, integer in self._int_slots:
            v = int(values[k]) if integer else values[k]
            if isinstance(v, int):
                ints.append(v)
        return tuple(ints)

    def arg_env(self, args):
        """Argument containers -> values, for evaluating trip counts and sizes."""
        values = self.cap.inputs(args)
        return {c: (int(v) if c.ndim == 0 and c.dtype.kind in "iu" else v)
                for c, v in zip(self.cap.params, values)}

    def ir_text(self):
        if self.mode in TANGENT_MODES:
            return program_text(self.tangent_prog)
        text = program_text(self.prog)
        if self.mode != "forward":
            fwd = Program(self.prog.name, self.prog.params, self.gp.forward, self.prog.results,
                          self.prog.containers)
            text = ("# forward (with tape pushes)\n" + program_text(fwd) +
                    "# backward\n" + self.backward_text + "\n")
        return text


class _Tiered:
    """A native program whose machine code another process is compiling (``Kernel`` raises
    ``Deferred``): meanwhile the NumPy backend's program of the same function runs its calls, made
    on the first of them; from the call after the compile finished on, native code runs. A first
    call that finds the machine code in the cache runs native code at once."""

    def __init__(self, native, kernel, make_numpy):
        self.native, self.kernel, self.make_numpy, self.numpy = native, kernel, make_numpy, None

    def __call__(self, *args):
        if self.kernel.ready:
            return self.native(*args)
        try:
            out = self.native(*args)
        except native_backend.Deferred:
            if self.numpy is None:
                self.numpy = self.make_numpy()
            return self.numpy(*args)
        self.make_numpy = self.numpy = None         # native code from now on: let go of the example arguments
        return out


def _native_vjp(grad_fn, cotangent):
    """The ``(result, pullback)`` convention over a compiled function running forward and backward
    together for a given cotangent. A scalar result's pullback is linear in the cotangent, so one
    call with cotangent 1 serves every pullback. A scalar's gradient comes as a number, an
    array's as an array."""
    scalar, complex_ = cotangent.ndim == 0, cotangent.dtype.kind == "c"

    def vjp_fn(*args):
        if scalar and complex_:
            # the pullback of a complex result is linear over the reals only: one call per cotangent
            result, _ = grad_fn(*args, 0j)
            return result, lambda ct: tuple(grad_fn(*args, complex(ct))[1])
        if scalar:
            result, grads = grad_fn(*args, 1.0)
            kept = [grads]

            def pullback(ct):
                # The first pullback hands over the computed arrays themselves (scaled in place): a
                # scaled copy of a large gradient costs as much as a pass of the backward sweep.
                # Later pullbacks recompute, since the caller owns the arrays handed over.
                mine = list(kept.pop() if kept else grad_fn(*args, 1.0)[1])
                for k, g in enumerate(mine):
                    if not isinstance(g, np.ndarray):
                        mine[k] = g * ct
                    elif ct == 1.0:
                        continue                    # (arrays shared by two gradients: _format_grads copies)
                    elif k and _overlaps(g, mine, k):
                        mine[k] = g.copy()          # a wrt named twice: its own array, scaled once
                    else:
                        g *= ct
                return tuple(mine)
            return result, pullback
        shape = tuple(d.value if isinstance(d, Const) else None for d in cotangent.shape)
        if None in shape:
            raise FlowgradError("the native backend needs a result of fixed shape for vjp; use backend='numpy'")
        result, _ = grad_fn(*args, np.zeros(shape, dtype=cotangent.dtype))
        return result, lambda ct: tuple(grad_fn(*args, np.ascontiguousarray(ct, dtype=cotangent.dtype))[1])
    return vjp_fn


class _Transform:
    """Shared machinery of grad/vjp/jit: signature checks, caching, introspection."""

    _flowgrad_transform = True      # what the frontend recognises a transform called in captured code by
    _nested_kind = None             # grad, value_and_grad, jit: how a call in captured code lowers
    CALLS_KEPT = 64                 # calls' answers kept (``calls``); more distinct integer arguments start afresh

    def _flowgrad_inline(self, fe, args, kwargs, loc):
        """A call of this transform inside captured code, lowered there (``api_nested``)."""
        return api_nested.Nested(self._nested_kind, self.fn, self.wrt_given)._flowgrad_inline(fe, args, kwargs, loc)

    def __init__(self, fn, wrt, backend, mode, memory_budget=None, strategy=None, allow_uncompute=False,
                 implicit_while=False):
        if getattr(fn, "_nested_kind", None) == "jit":
            fn = fn.fn                  # a transform of jit(f) is that of f
        if getattr(fn, "_flowgrad_transform", False) and not hasattr(fn, "_flowgrad_capture"):
            raise UnsupportedError(f"unsupported nesting of flowgrad transforms ({type(self).__name__} of "
                                   f"{type(fn).__name__}({fn.__name__})): a transform takes a function, grad(f) "
                                   "or jit(f); write the composition as a function calling the inner transform "
                                   "(lambda x: flowgrad.value_and_grad(f)(x)[1]), or use flowgrad.hessian or "
                                   "flowgrad.hvp")
        self.memory_budget = parse_bytes(memory_budget)
        self.allow_uncompute = bool(allow_uncompute)
        self.implicit_while = bool(implicit_while)
        if strategy is None:
            strategy = "fastest" if self.memory_budget is None else "ilp"
        if strategy not in ("fastest", "store_all", "recompute_all", "ilp"):
            raise InputError(f"strategy must be 'fastest', 'store_all', 'recompute_all' or 'ilp', not {strategy!r}")
        if strategy == "fastest" and self.memory_budget is not None:
            raise InputError("strategy 'fastest' plans without a memory budget; with memory_budget, "
                             "use strategy='ilp' (the default then)")
        self.strategy = strategy
        if backend not in BACKENDS:
            raise InputError(f"unknown backend {backend!r}; available: {', '.join(BACKENDS)}")
        if not callable(fn):
            raise InputError(f"{fn!r} is not a function")
        self.fn, self.backend, self.mode = fn, backend, mode
        if backend == "native":
            native_kernel.warm_up()
        self.signature = inspect.signature(fn)
        self.params = list(self.signature.parameters)
        self._positional = all(p.kind == p.POSITIONAL_OR_KEYWORD for p in self.signature.parameters.values())
        self._wrt = None            # ``resolve_wrt``'s answer, once found
        self.wrt_given = wrt
        self.cache = {}
        self.plans = {}             # (entry, checkpoint parameters, plan) by signature and integer arguments
        self.calls = {}             # value_and_grad: (entry, checkpoint parameters, wrt positions, single) by _call_key
        self.__name__ = getattr(fn, "__name__", "fn")
        self.__doc__ = getattr(fn, "__doc__", None)
        self.__signature__ = self.signature      # a transform taking this one sees fn's arguments

    def __reduce__(self):
        # pickled (to another process, a Dask worker): the function and the options, not what was
        # compiled here; the shared on-disk cache serves the native code there
        return _restore_transform, (type(self), self.fn, self.wrt_given, self.backend, self.mode, self.memory_budget,
                                    self.strategy, self.allow_uncompute, self.implicit_while)

    def bind(self, args):
        """The call's arguments by name, defaults applied."""
        if len(args) == len(self.params) and self._positional:
            return dict(zip(self.params, args))          # what binding gives, without its cost per call
        try:
            bound = self.signature.bind(*args)
        except TypeError as exc:
            raise InputError(f"calling {self.__name__}: {exc}") from None
        bound.apply_defaults()
        return bound.arguments

    def wrt_names(self, args, arguments=None):
        """(names of the ``wrt`` arguments, whether ``wrt`` is a single one); ``arguments``: the
        call's, when already bound."""
        names, single = self.resolve_wrt()
        arguments = self.bind(args) if arguments is None else arguments
        for n in names:
            # a float or a float array passes at a glance (and so does a name not among the arguments)
            v = arguments.get(n, 0.0)
            if type(v) is not float and not (type(v) is np.ndarray and v.dtype.kind in "fc"):
                _check_wrt_value(n, v)
        return names, single

    def resolve_wrt(self):
        """(names of the ``wrt`` arguments, whether ``wrt`` is a single one), from the signature."""
        if self._wrt is None:
            self._wrt = self._resolve_wrt()
        return self._wrt

    def _resolve_wrt(self):
        wrt = self.wrt_given
        single = not isinstance(wrt, (tuple, list))
        items = [wrt] if single else list(wrt)
        names = []
        for w in items:
            if isinstance(w, (int, np.integer)) and not isinstance(w, bool):
                if not -len(self.params) <= w < len(self.params):
                    raise InputError(f"wrt position {w} is out of range: {self.__name__} takes "
                                     f"{len(self.params)} arguments ({', '.join(self.params)})")
                names.append(self.params[w])
            elif isinstance(w, str):
                if w not in self.params:
                    extra = _input_name(self.fn, w)
                    if extra is None:
                        raise InputError(f"wrt name {w!r} is not an argument of {self.__name__}; "
                                         f"its arguments are: {', '.join(self.params)}")
                    w = extra
                names.append(w)
            else:
                raise InputError(f"wrt entries must be argument names or positions, not {w!r} (wrt={wrt!r}; "
                                 f"{self.__name__} takes {', '.join(self.params)}): pass wrt='name', wrt=0 or a "
                                 "tuple of them")
        return tuple(names), single

    def planned(self, args, entry=None):
        """(compiled entry, checkpoint parameters, plan) for a call, honouring the memory budget;
        ``entry``: the call's store-all entry, when already looked up."""
        entry = self.compiled(args) if entry is None else entry
        if self.mode == "forward" or self.strategy == "store_all" or \
                self.strategy == "fastest" and self.backend != "native":
            return entry, {}, None      # (the NumPy backend's iterations cost more run again than stored)
        # a plan depends on the signature and on the integer arguments (trip counts, sizes); the
        # answer for them is kept, so that a call repeating them looks it up (``drop_stale`` forgets it)
        plan_key = (id(entry), entry.plan_ints(args))
        chosen = self.plans.get(plan_key)
        if chosen is None:
            plan = self._plan(entry, entry.arg_env(args), plan_key[1])
            kinds = {var: kind for var, kind in plan.key() if kind != 0}
            if not kinds and not plan.recompute:
                chosen = (entry, {}, plan)
            else:
                key = (self.cache_key(args), tuple(sorted(kinds.items())), plan.recompute)
                variant = self.cache.get(key)
                if variant is None:
                    variant = _Compiled(self.fn, args, self.wrt_names(args)[0], self.backend, self.mode, kinds,
                                        self.allow_uncompute, self.implicit_while, plan.recompute)
                    self.cache[key] = variant
                chosen = (variant, plan.params(), plan)
            self.plans[plan_key] = chosen
        return chosen

    def _plan(self, entry, env, ints):
        """The plan for a call whose integer arguments are ``ints``. The ``"fastest"`` strategy's
        choice is kept on disk beside the program's source: a new process finding both there does
        not lower the program to plan it again."""
        key = entry.program_key and self.strategy == "fastest" and \
            native_kernel.program_key(pickle.dumps((entry.program_key, "fastest", ints), protocol=4))
        stored = native_kernel.load_program(key, "plan") if key else None
        if stored is not None:
            return Chosen([tuple(loop) for loop in stored["loops"]])
        plan = plan_program(entry.prog, entry.gp, env, self.memory_budget, self.strategy, self.backend,
                            report=False)
        if key:
            native_kernel.store_program(key, {"loops": [[c.key, kind, param] for c, kind, param, _, _ in plan.loops
                                                        if kind != STORE_ALL]}, "plan")
        return plan

    def cache_key(self, args, arguments=None, wrt=None):
        """The signature a call's capture is cached under; ``wrt``: its ``wrt`` names, when
        already checked (``wrt_names``)."""
        arguments = self.bind(args) if arguments is None else arguments
        if self.mode == "forward":
            wrt = ()
        elif wrt is None:
            wrt = self.wrt_names(args, arguments)[0]
        key = tuple([_arg_key(v, n, n in wrt) for n, v in arguments.items()])
        return (key,) if self.mode == "forward" else (key, wrt)

    def compiled(self, args, arguments=None, wrt=None):
        """The store-all specialisation for these arguments' signature (captured on first use);
        ``arguments`` and ``wrt`` as ``cache_key`` takes them."""
        key = self.cache_key(args, arguments, wrt)
        entry = self.cache.get(key)
        if entry is not None and not entry.cap.current():
            self.drop_stale()
            entry = None
        if entry is None:
            entry = _Compiled(self.fn, args, key[1] if self.mode != "forward" else (), self.backend, self.mode,
                              uncompute=self.allow_uncompute, implicit_while=self.implicit_while)
            self.cache[key] = entry
            if os.environ.get("FLOWGRAD_DUMP"):
                print(entry.ir_text())
        return entry

    def drop_stale(self):
        """Forget the captures (and their plans) that read a module global, closure variable or
        helper since rebound: the next call captures the function again, as Python would run it."""
        for key, entry in list(self.cache.items()):
            if not entry.cap.current():
                del self.cache[key]
        self.calls.clear()
        kept = {id(e) for e in self.cache.values()}
        self.plans = {k: v for k, v in self.plans.items() if k[0] in kept and id(v[0]) in kept}

    def wait(self):
        """Block until the native code compiling in other processes for this transform's calls so
        far (``FLOWGRAD_TIERED``) is ready: the next calls run it. Returns the transform."""
        for entry in self.cache.values():
            if entry.kernel is not None:
                entry.kernel.wait()
        return self

    def release(self):
        """Free the working memory compiled native code keeps between calls (intermediates,
        scratch arrays, tapes); the next call allocates it again."""
        for entry in self.cache.values():
            if entry.kernel is not None:
                entry.kernel.release()

    def source(self, *args):
        """The generated Python source for this call signature."""
        return self.compiled(args).src

    def ir(self, *args):
        """The IR (forward, and backward for gradients) as text, for this call signature."""
        return self.compiled(args).ir_text()


_EXPECTED = ("expected a float array, a float, or a tuple, list, dict, NamedTuple, dataclass or object holding "
             "them")


def _restore_transform(cls, fn, wrt, backend, mode, memory_budget, strategy, allow_uncompute, implicit_while=False):
    """A transform unpickled: ``cls`` of ``fn`` with those options, nothing compiled yet."""
    t = object.__new__(cls)
    _Transform.__init__(t, fn, wrt, backend, mode, memory_budget, strategy, allow_uncompute, implicit_while)
    return t


def _check_wrt_value(name, v):
    """An InputError unless argument ``name``'s value ``v`` can be differentiated."""
    if isinstance(v, (bool, np.bool_)):
        raise InputError(f"wrt argument {name!r} is a bool; only float arguments can be differentiated "
                         f"({_EXPECTED})")
    if isinstance(v, (int, np.integer)):
        raise InputError(f"wrt argument {name!r} is an integer ({v!r}); only float arguments can be differentiated: "
                         f"pass {float(v)!r} ({_EXPECTED})")
    if isinstance(v, np.ndarray):
        if v.dtype.kind not in "fc":
            kind = "an integer or boolean" if v.dtype.kind in "biu" else f"a {v.dtype}"
            raise InputError(f"wrt argument {name!r} is {kind} array (dtype {v.dtype}, shape {v.shape}); only "
                             f"float arrays can be differentiated: pass {name}.astype(np.float64)")
        return
    if isinstance(v, (float, np.floating, complex, np.complexfloating)):
        return
    if pytree.is_node(v, objects=True):
        try:
            leaves, _ = pytree.flatten(v, objects=True)
        except ValueError as exc:
            raise InputError(f"wrt argument {name!r}: {exc}") from None
        if not any(_is_float_leaf(x) for x in leaves):
            raise InputError(f"wrt argument {name!r} is a {type(v).__name__} holding no float arrays or floats "
                             f"({_EXPECTED})")
        return
    raise InputError(f"wrt argument {name!r} is a {type(v).__name__}; {_EXPECTED}")


def _copy_in(args):
    """Values for the generated code (it copies arrays itself; scalars are immutable)."""
    return args


def _run_vjp(entry, args, ckpt_values=None):
    return entry.func(*entry.call_args(args, ckpt_values))


def _overlaps(g, arrays, k):
    """Whether array ``g`` may share memory with any of the arrays among ``arrays[:k]``."""
    for i in range(k):
        a = arrays[i]
        if isinstance(a, np.ndarray) and a is not g and g.base is None and a.base is None and g.size and a.size:
            continue                # two arrays each owning its memory (the common case, told at a glance)
        if isinstance(a, np.ndarray) and np.may_share_memory(g, a):
            return True
    return False


def _input_name(fn, name):
    """``name`` as an input of program object ``fn`` other than its arguments (a Fortran module
    variable, ``"module.name"``), else None."""
    find = getattr(fn, "_flowgrad_input_name", None)
    return None if find is None else find(name)


def _format_grads(entry, grads, wrt, single, args_by_name, fn=None):
    """The gradients as the caller gets them: one per ``wrt`` argument, a pytree argument's as a
    tree of its structure (integer leaves get zeros, static leaves stay as they are); an input of
    program object ``fn`` other than its arguments as ``fn`` gives it."""
    out, arrays = [], []

    def leaf(g, v):
        if isinstance(v, np.ndarray):
            return _array_grad(g, v, arrays)
        return complex(g) if isinstance(v, (complex, np.complexfloating)) else float(g)

    pos = 0
    for name, picks in zip(wrt, entry.wrt_layout):
        if name not in args_by_name:
            out.append(fn._flowgrad_input_grad(grads[pos]))
            pos += 1
            continue
        v = args_by_name[name]
        if picks is None:
            out.append(leaf(grads[pos], v))
            pos += 1
            continue
        leaves, tree = pytree.flatten(v, objects=True)
        new = [_zero_like(x) for x in leaves]
        for k, at in picks:
            new[k] = leaf(grads[at], leaves[k])
        pos += len(picks)
        out.append(tree.unflatten(new))
    return out[0] if single else tuple(out)


def _call_key(args):
    """What a call's answer (program, plan, layout of the gradients) depends on, where every
    argument is a float, an int or an array: an array's shape and dtype, the value of an int (plans
    depend on integer arguments); None for a call with any other argument."""
    key = []
    for v in args:
        t = type(v)
        if t is np.ndarray:
            key.append((v.shape, v.dtype))
        elif t is float:
            key.append(None)
        elif t is int:
            key.append(v)
        else:
            return None
    return tuple(key)


def _picked_grads(grads, args, picks, single):
    """``_format_grads`` for a call whose ``wrt`` arguments are plain floats and arrays, at
    positions ``picks`` of ``args``."""
    out, arrays = [], []
    for g, k in zip(grads, picks):
        v = args[k]
        out.append(_array_grad(g, v, arrays) if type(v) is np.ndarray else float(g))
    return out[0] if single else tuple(out)


def _array_grad(g, v, arrays):
    """Gradient ``g`` of array argument ``v`` as the caller gets it: ``v``'s dtype and shape, and
    memory of its own among the gradient arrays handed over so far (``arrays``, appended to)."""
    if type(g) is not np.ndarray or g.dtype != v.dtype or g.shape != v.shape:
        g = np.asarray(g, dtype=v.dtype).reshape(v.shape)
    if arrays and _overlaps(g, arrays, len(arrays)):
        g = g.copy()                # a wrt named twice gets arrays of its own
    arrays.append(g)
    return g


def _zero_like(v):
    if isinstance(v, np.ndarray):
        return np.zeros_like(v)
    if isinstance(v, (int, float, np.number)) and not isinstance(v, (bool, np.bool_)):
        return type(v)(0)
    return v


def _unpack_result(entry, out):
    """The caller's result from the program's (a pytree result rebuilt; a 0-d one as NumPy's scalar)."""
    layout = entry.layout
    if layout is not None and layout.packed:
        return layout.unpack(out)
    if entry.result.ndim == 0 and not isinstance(out, np.ndarray):
        out = entry.result.dtype.type(out)       # NumPy's scalar type (np.float32 for float32)
    return out if layout is None else layout.unpack(out)


def _scalar_result(entry, name):
    r = entry.result
    if entry.layout is not None:
        raise InputError(f"grad of {name} requires a float scalar result, but it returns a "
                         f"{entry.layout.tree.kind}; use flowgrad.vjp for tuple, list and dict results")
    if r.ndim == 0 and r.dtype.kind == "c":
        raise InputError(f"grad of {name} requires a real scalar result, but it returns a {r.dtype} scalar: a "
                         "gradient is of a real-valued function (JAX's convention, dL/dx - i dL/dy for z = x + iy); "
                         "differentiate np.abs(...) ** 2 or np.real(...) of it, or use flowgrad.vjp for the "
                         "complex result")
    if r.ndim != 0 or r.dtype.kind != "f":
        kind = f"an array of shape {tuple(getattr(d, 'value', d) for d in r.shape)}" if r.ndim else \
            f"a {r.dtype} scalar"
        raise InputError(f"grad of {name} requires a float scalar result, but it returns {kind}; "
                         "use flowgrad.vjp for array results (or reduce the result to a scalar)")


class value_and_grad(_Transform):
    """Make a function returning ``(value, gradient)`` of a scalar-valued ``fn``.

    Args:
      fn: a Python function using NumPy (loops, in-place updates, views, branches are fine).
      wrt: argument name or position, or a tuple of them (default 0, the first argument).
      backend: ``"numpy"``.

    Returns:
      A callable ``vg(*args) -> (value, grads)``: ``grads`` is one array (or float) for a single
      ``wrt``, a tuple for a tuple. The caller's arrays are never modified.

    Example:
      >>> vg = flowgrad.value_and_grad(lambda_free_fn, wrt="x")   # doctest: +SKIP
      >>> value, gx = vg(x, 3)                                       # doctest: +SKIP
    """

    _nested_kind = "value_and_grad"
    _flowgrad_nested = staticmethod(api_nested.nested_transform("value_and_grad"))

    def __init__(self, fn, wrt=0, backend=None, memory_budget=None, strategy=None, allow_uncompute=False,
                 implicit_while=False):
        super().__init__(fn, wrt, backend or DEFAULT_BACKEND, "reverse", memory_budget, strategy, allow_uncompute,
                         implicit_while)

    def __call__(self, *args):
        # a call like an earlier one (arrays of the same shapes and dtypes, floats, the same integers)
        # runs what that one settled on, found by one lookup; the first such call settles it
        key = _call_key(args)
        known = self.calls.get(key) if key is not None else None
        if known is not None and known[0].cap.current():
            entry, ckpt, picks, single = known
            value, pullback = _run_vjp(entry, args, ckpt)
            return float(value), _picked_grads(pullback(1.0), args, picks, single)
        arguments = self.bind(args)
        wrt, single = self.wrt_names(args, arguments)
        entry = self.compiled(args, arguments, wrt)
        _scalar_result(entry, self.__name__)
        entry, ckpt, _ = self.planned(args, entry)
        value, pullback = _run_vjp(entry, args, ckpt)
        grads = _format_grads(entry, pullback(1.0), wrt, single, arguments, self.fn)
        if key is not None and len(args) == len(self.params) and self._positional and \
                all(n in arguments for n in wrt) and entry.wrt_layout == [None] * len(wrt):
            if len(self.calls) >= self.CALLS_KEPT:
                self.calls.clear()
            self.calls[key] = (entry, ckpt, [self.params.index(n) for n in wrt], single)
        return float(value), grads


class grad(value_and_grad):
    """Make a function returning the gradient of a scalar-valued ``fn``.

    Args:
      fn: a Python function using NumPy, returning a float scalar.
      wrt: argument name or position, or a tuple of them (default 0).
      backend: ``"native"`` (Numba; the default when installed) or ``"numpy"``.
      memory_budget: bytes (or ``"512MiB"``) the gradient may use; loop tapes beyond it are
        replaced by checkpoint schedules chosen by an integer linear program.
      strategy: ``"fastest"``, ``"store_all"``, ``"recompute_all"`` or ``"ilp"`` (default:
        ``"ilp"`` when a budget is given, else ``"fastest"``: every iteration stored, except where
        the native backend runs a loop again faster than its tape streams through memory; see
        ``checkpoint.plan.faster_recomputed``).
      allow_uncompute: restore a value an invertible update overwrote (``x[S] += e`` with ``e``
        not reading ``x``, ``x[S] *= c`` by a nonzero constant) by running the update backwards
        in the backward sweep instead of keeping it on a tape. Off by default: the restored value
        differs from the original by the rounding of the update (see the README).
      implicit_while: differentiate each top-level ``while`` loop that iterates one float state
        until successive iterates agree implicitly, at its fixed point, as ``flowgrad.fixed_point``
        does: memory independent of the iteration count, the derivative exact where the loop
        converged (see ``flowgrad.implicit.implicit_whiles`` for which loops qualify; others are
        differentiated through).

    Returns:
      ``g(*args)``: the gradient w.r.t. ``wrt`` at ``args`` (one array, or a tuple).

    Example:
      >>> def f(x):
      ...     return np.sum(np.sin(x) ** 2)
      >>> flowgrad.grad(f)(np.ones(3))                             # doctest: +SKIP
    """

    _nested_kind = "grad"
    _flowgrad_nested = staticmethod(api_nested.nested_transform("grad"))

    def __call__(self, *args):
        return super().__call__(*args)[1]

    def _flowgrad_capture(self, args):
        """``grad(fn)`` as a captured program, so that ``jvp``, ``jacfwd``, ``linearize`` and ``jit``
        take it (forward over reverse, as ``hvp``): the gradient program of ``fn`` (its forward
        sweep with the tapes, then the backward sweep from cotangent 1), returning the gradient.
        Reverse mode over it (``grad`` of ``grad``, ``hessian`` of ``grad``) is refused."""
        names, single = self.wrt_names(args)
        if not single:
            raise UnsupportedError(f"a transform of grad({self.__name__}) with a tuple wrt: its result would be "
                                   "a tuple of gradients; take grad of one argument")
        cap = capture(self.fn, args, object_args=names)
        unit = pipeline.run(pipeline.CAPTURED, pipeline.Unit({"body": cap.body}, cap.containers, cap.namer,
                                                             [cap.result], self.backend, "reverse"))
        if cap.result_layout is not None or cap.result.ndim or cap.result.dtype.kind != "f":
            raise InputError(f"grad of {self.__name__} requires a real float scalar result")
        wrt, layout = _wrt_containers(cap, names)
        if layout != [None]:
            raise UnsupportedError(f"a transform of grad({self.__name__}) in a pytree argument: take grad of an "
                                   "array or float argument")
        prog = Program(cap.name, cap.params, unit.sweeps["body"], [cap.result], cap.containers)
        gp, cotangent = _gradient_program(prog, wrt, cap.namer)
        cotangent.kind = "transient"            # no parameter here: the cotangent is 1
        cap.body = [Assign(Ref(cotangent, ()), Const(1.0))] + gp.body
        cap.result, cap.containers, cap.result_layout, cap.lowered = gp.results[0], gp.containers, None, True
        return cap


def vjp(fn, *args, wrt=None, backend=None, implicit_while=False):
    """Run ``fn(*args)`` and return ``(result, pullback)``.

    Args:
      fn: a Python function using NumPy; its result may be an array, a scalar, or a tuple, list
        or dict of them (a pytree).
      *args: the arguments (arrays, numbers, or pytrees of them).
      wrt: names or positions to differentiate (default: every argument that is, or holds, a
        float array or a float).
      implicit_while: as for ``grad``.

    Returns:
      ``(result, pullback)``; ``pullback(cotangent)`` (a cotangent of the result's structure)
      returns a tuple with one gradient per ``wrt`` entry, the vector-Jacobian product
      ``cotangent^T J``; a pytree argument's gradient has its structure. The pullback pickles
      (a ``Pullback``): it carries ``fn``, copies of the arguments and the options, and runs the
      forward sweep again in the process that unpickles it, on its first call.

    Example:
      >>> out, pull = flowgrad.vjp(f, A, wrt="A")                  # doctest: +SKIP
      >>> (gA,) = pull(np.ones_like(out))                          # doctest: +SKIP
    """
    result, pull, args = _vjp_closure(fn, args, wrt, backend, implicit_while)
    return result, Pullback(fn, args, wrt, backend, implicit_while, pull)


class Pullback:
    """The pullback of ``flowgrad.vjp(fn, *args)``: ``pullback(cotangent)`` returns the
    vector-Jacobian products, one per ``wrt`` entry.

    It pickles (to another process, a Dask worker) as ``fn``, the arguments (the copies ``vjp``
    took) and the options: the residuals of the forward sweep stay here, and the receiving
    process runs the forward sweep again on its first call, compiling once or finding the
    native code in the shared on-disk cache (which holds code, never these arguments). A program
    object (``from_torch``) reads its parameters when that forward sweep runs.
    """

    def __init__(self, fn, args, wrt=None, backend=None, implicit_while=False, pull=None):
        self.fn, self.args, self.wrt, self.backend, self.implicit_while = fn, args, wrt, backend, implicit_while
        self._pull = pull

    def __call__(self, cotangent):
        if self._pull is None:
            _, self._pull, self.args = _vjp_closure(self.fn, self.args, self.wrt, self.backend, self.implicit_while)
        return self._pull(cotangent)

    def __reduce__(self):
        return Pullback, (self.fn, self.args, self.wrt, self.backend, self.implicit_while)

    def __repr__(self):
        return f"<flowgrad.Pullback of {getattr(self.fn, '__name__', 'fn')}>"


def _vjp_closure(fn, args, wrt, backend, implicit_while):
    """``(result, pullback, args)`` of ``fn`` at copies ``args`` of the arguments, the pullback a
    closure over the forward sweep's residuals and those copies (it differentiates at these
    values, whatever the caller does to its arrays after)."""
    if hasattr(fn, "_flowgrad_vjp"):      # a program object (from_torch, from_onnx) has its own convention
        args = tuple(_copy_arrays(a, False) for a in args)
        return (*fn._flowgrad_vjp(args, wrt=wrt, backend=backend), args)
    if getattr(fn, "_flowgrad_transform", False):
        _Transform(fn, (), backend or DEFAULT_BACKEND, "reverse")          # raises: nesting
    if wrt is None:
        bound = inspect.signature(fn).bind(*args)
        bound.apply_defaults()
        wrt = tuple(n for n, v in bound.arguments.items()
                    if _is_float_leaf(v) or pytree.is_node(v) and any(_is_float_leaf(x) for x in pytree.flatten(v)[0]))
    elif not isinstance(wrt, (tuple, list)):
        wrt = (wrt,)
    t = _Transform(fn, tuple(wrt), backend or DEFAULT_BACKEND, "reverse", implicit_while=implicit_while)
    names, _ = t.wrt_names(args)
    args = tuple(_copy_arrays(a, n in names) for a, n in zip(args, t.params))
    entry = t.compiled(args)
    value, pull = _run_vjp(entry, args)
    bound = t.bind(args)
    used = [False]
    layout = entry.layout
    result = _unpack_result(entry, value) if layout is not None else value

    def pullback(cotangent):
        if layout is not None:
            cotangent = layout.pack_cotangent(cotangent, value)
        rdt = entry.result.dtype
        if rdt.kind != "c" and np.iscomplexobj(cotangent):
            raise InputError(f"the cotangent is complex but the result of {t.__name__} is real ({rdt}): pass a "
                             "real cotangent")
        ct = np.asarray(cotangent, dtype=rdt if rdt.kind in "fc" else np.float64)
        want = np.shape(value)
        if ct.shape != want:
            raise InputError(f"cotangent has shape {ct.shape} but the result of {t.__name__} has shape {want}")
        if used[0]:
            _, again = _run_vjp(entry, args)
            grads = again(ct if ct.ndim else ct.item())
        else:
            used[0] = True
            grads = pull(ct if ct.ndim else ct.item())
        return tuple(_format_grads(entry, grads, names, False, bound))

    return result, pullback, args


vjp._flowgrad_inline = api_nested.inline_vjp        # vjp called inside captured code


def _copy_arrays(value, objects):
    """``value`` with its arrays (a pytree's too) copied."""
    if isinstance(value, np.ndarray):
        return np.array(value)
    if pytree.is_node(value, objects):
        leaves, tree = pytree.flatten(value, objects=objects)
        return tree.unflatten([np.array(v) if isinstance(v, np.ndarray) else v for v in leaves])
    return value


class jit(_Transform):
    """Capture ``fn`` and run its forward program (NumPy semantics, compiled once per signature).

    Example:
      >>> f = flowgrad.jit(heat)                                   # doctest: +SKIP
      >>> f(u, 0.1, 10) == heat(u.copy(), 0.1, 10)                 # doctest: +SKIP
    """

    _nested_kind = "jit"
    _flowgrad_nested = staticmethod(api_nested.nested_transform("jit"))

    def __init__(self, fn, backend=None):
        super().__init__(fn, None, backend or DEFAULT_BACKEND, "forward")

    def __call__(self, *args):
        entry = self.compiled(args)
        out = entry.func(*entry.call_args(args))
        if hasattr(self.fn, "_flowgrad_result"):     # a program object unpacks its own results
            return self.fn._flowgrad_result(entry.cap, out)
        return _unpack_result(entry, out)


__all__ = ["grad", "value_and_grad", "vjp", "Pullback", "jit", "explain", "FlowgradError"]


def explain(fn, *args, wrt=0, memory_budget=None, strategy=None, backend=None, allow_uncompute=False,
            implicit_while=False, plot=None):
    """Print and return the memory plan of ``grad(fn, wrt, memory_budget=..., strategy=...)(*args)``.

    The plan lists each loop tape (iterations, bytes per iteration, loop state) with the chosen
    schedule (store all, periodic snapshots or binomial), its memory and extra FLOPs, the
    predicted peak against the budget, and then each value the backward sweep needs with its
    size, the user's line, and how the plan gets it back (stored, recomputed, uncomputed, kept
    alive, implicit). ``plot``: a file path; the predicted memory timeline of the plan is drawn
    there (matplotlib), so the peak's place is seen.

    Example:
      >>> flowgrad.explain(heat, u, 0.1, 1000, wrt="kappa", memory_budget="4MiB")   # doctest: +SKIP
    """
    g = value_and_grad(fn, wrt=wrt, backend=backend, memory_budget=memory_budget,
                       strategy=strategy or ("ilp" if memory_budget is not None else "fastest"),
                       allow_uncompute=allow_uncompute, implicit_while=implicit_while)
    entry = g.compiled(args)
    plan = plan_program(entry.prog, entry.gp, entry.arg_env(args), g.memory_budget, g.strategy, g.backend)
    if plot is not None:
        plan.plot(plot)
    print(plan)
    return plan
