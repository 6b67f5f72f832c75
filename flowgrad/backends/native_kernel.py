"""Compiling the native backend's generated source and running it: the source is written to a
cache directory, named by its hash, and imported, so Numba's ``cache=True`` machine code is
reused by a new process; a ``Kernel`` holds the compiled function with its workspace.

Compiling a large generated function takes Numba from seconds to minutes. A kernel whose
machine code is not in the cache yet for its argument types can be compiled in another process
(``Kernel.deferrable``, set where the caller has another way to run the call meanwhile: the
NumPy backend, see ``api._Tiered``): its calls raise ``Deferred`` until that process has written
the machine code to the cache, then load it. A compile that runs in this process and takes more
than ``PROGRESS_AFTER`` seconds prints a line naming what compiles (``FLOWGRAD_PROGRESS=0``: none).

A new process finding everything in the cache runs native code on its first call at little more
than the call's own cost: the generated source of each captured program is kept too
(``store_program``, signed so that only a file flowgrad wrote is taken), the machine code is loaded
without Numba's full typing set-up (``_load_cached``), and Numba's runtime is prepared on a
background thread while the first program is captured (``warm_up``).
"""
from __future__ import annotations

import functools
import hashlib
import hmac
import importlib.util
import json
import os
import pickle
import secrets
import subprocess
import sys
import threading
import time
import warnings

import numpy as np

PROGRESS_AFTER = 2.0        # seconds of compiling in this process before a progress line


class Deferred(Exception):
    """A call of a kernel whose machine code another process is still compiling (or is waiting to
    compile)."""


def usable_cpus():
    """The CPUs this process may run on (its affinity: a container's share, ``taskset``)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


# How many compiling processes may run at once: one per CPU this process may use. A program that
# makes many transforms (a test suite, a sweep over functions) otherwise started one process for
# each at its first call, all at once (40 on 2 CPUs, about 220 MB each, measured).
COMPILES_AT_ONCE = max(1, usable_cpus())
_compilers = []     # the compiling processes this process started that may still run


def tiered() -> bool:
    """Whether native code not yet in the cache compiles in another process while the NumPy
    backend runs the calls (``FLOWGRAD_TIERED``, on unless "0")."""
    return os.environ.get("FLOWGRAD_TIERED", "1") != "0"


def progress(message):
    """A progress line on stderr (``FLOWGRAD_PROGRESS=0``: none)."""
    if os.environ.get("FLOWGRAD_PROGRESS", "1") != "0":
        print(f"flowgrad: {message}", file=sys.stderr, flush=True)


class Kernel:
    """A compiled function with its workspace: the buffers its fixed-shape intermediates, scratch
    arrays and tapes live in, kept between calls (a pool, so concurrent or re-entrant calls each
    get their own). ``release()`` frees them.

    Fixed-shape arrays the function hands over (results, gradients) are recycled: the kernel
    remembers the last few it returned for each, and offers one back to the function once the
    caller holds no reference to it (not even through a view). A loop that drops each gradient
    after use then does not page in fresh memory on every call; measured 18% of a gradient
    returning two 32 MB arrays, which the C allocator hands back to the system when freed."""

    KEEP = 2        # arrays remembered per output: a caller holding the previous one still gets one

    def __init__(self, fn, types, out_types=(), serial=None, sites=(), source=None, flushes=False):
        self.fn = fn
        self.flushes = flushes      # it flushes subnormal numbers to zero for a while (``native_math``)
        self.sites = sites          # the user's line of each index check, by its number
        self.types = types          # per workspace buffer: (dtype, ndim, shape where fixed, else None)
        self.grown = [k for k, (_, _, fixed) in enumerate(types) if fixed is None]    # handed back by each call
        self.out_types = out_types
        self.pool = []
        self.spare = [[] for _ in out_types]
        self.outputs = range(len(out_types))
        self.serial = serial        # loads the one-thread version, until the first call compiled
        self.source = source        # (generated source, its path in the cache)
        self.deferrable = False     # the first call may compile in another process (``Deferred``)
        self.compiling = None       # that process, while it runs
        self.ready = False          # machine code for the call's types is in this process or its cache
        self.marker = ""            # set for the first call here: the file written once it compiled

    def _prepare(self, args):
        """Before the first call in this process: machine code for its types is loaded or compiled
        here (``marker`` set: the call compiles), or another process compiles it and this raises
        ``Deferred`` (``deferrable``) until that process has finished."""
        if self.compiling is not None:
            if self.compiling.poll() is None:
                raise Deferred(self.fn.__name__)
            seconds = time.perf_counter() - self.compiling.started
            self.marker, self.compiling = self.compiling.marker, None
            self.ready = True
            progress(f"native code for {self.fn.__name__} compiled in {seconds:.1f} s; it runs the calls from now on")
            return
        import numba
        types = tuple(numba.typeof(a) for a in args) + tuple(
            numba.typeof(tuple(np.empty((0,) * nd, dtype=dt) for dt, nd, *_ in group))
            for group in (self.types, self.out_types))
        marker = self._marker(types)
        cached = bool(marker) and os.path.exists(marker)
        if self.deferrable and self.source is not None and not cached:
            _compilers[:] = [p for p in _compilers if p.poll() is None]
            if len(_compilers) >= COMPILES_AT_ONCE:
                raise Deferred(self.fn.__name__)        # the NumPy backend runs it; a later call starts it
            self.compiling = _compile_elsewhere(self.source, self.fn.__name__, types, marker)
            _compilers.append(self.compiling)
            lines = self.source[0].count("\n")
            progress(f"compiling native code for {self.fn.__name__} ({lines} lines) in another process; the NumPy "
                     "backend runs the calls until it is ready")
            raise Deferred(self.fn.__name__)
        self.ready = True
        self.marker = "" if cached and _load_cached(self.fn, types) else marker

    def _marker(self, types):
        """The file saying that the cache holds machine code for ``types`` (written after compiling)."""
        if self.source is None:
            return ""
        key = hashlib.sha256(repr(types).encode()).hexdigest()[:16]
        return f"{self.source[1][:-3]}.{self.fn.__name__}.{key}.compiled"

    def _first(self, args):
        """Run the first call of a function with parallel loops; should Numba fail to compile
        them (its parallel passes have bugs of their own), warn and use the one-thread version."""
        import numba
        try:
            return self.fn(*args)
        except (numba.core.errors.NumbaError, AssertionError) as exc:
            warnings.warn(f"flowgrad: Numba could not compile the parallel loops of {self.fn.__name__} "
                          f"({type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]}); "
                          "they run on one thread", RuntimeWarning, stacklevel=4)
            self.fn = self.serial().fn
            return self.fn(*args)
        finally:
            self.serial = None

    def _offer(self, k):
        bufs = self.spare[k]
        for i in range(len(bufs) - 1, -1, -1):      # the latest first: a caller dropping each gets it hot
            if _unheld(bufs[i]):
                return bufs.pop(i)
        dt, nd, _ = self.out_types[k]
        return np.empty((0,) * nd, dtype=dt)

    def __call__(self, *args):
        if not self.flushes:
            return self._call(args)
        fp_mode, restore_fp_mode = _fp_functions()
        mode = fp_mode()
        try:
            return self._call(args)
        except BaseException:
            restore_fp_mode(mode)       # stopped between flushing subnormals and putting the mode back
            raise

    def _call(self, args):
        first = not self.ready
        if first:
            self._prepare(args)
        ws = self.pool.pop() if self.pool else self._workspace()
        args = args + (ws, tuple([self._offer(k) for k in self.outputs]))
        try:
            if first and self.marker:
                out = self._compile_here(args)
            else:
                out = self.fn(*args) if self.serial is None else self._first(args)
        except IndexError as exc:
            from .native_runtime import OUT_OF_BOUNDS
            if exc.args[:1] != (OUT_OF_BOUNDS,):
                raise
            site = exc.args[3] if len(exc.args) > 3 else -1
            where = self.sites[site] if 0 <= site < len(self.sites) else ""
            where = f"{where}: " if where else ""
            raise IndexError(f"{where}index {exc.args[1]} is out of bounds for axis with size {exc.args[2]}"
                             + ("" if where else f" (in the code flowgrad compiled for {self.fn.__name__})")) \
                from None
        except ValueError as exc:
            if len(exc.args) < 2 or not isinstance(exc.args[0], str) or "{}" not in exc.args[0]:
                raise
            raise ValueError(exc.args[0].format(*exc.args[1:])) from None     # check_sizes
        for k, buf in zip(self.grown, out[-1] if self.grown else ()):
            if ws[k] is not buf:        # a buffer grew: the workspace keeps the grown ones
                ws = list(ws)
                for k, buf in zip(self.grown, out[-1]):
                    ws[k] = buf
                ws = tuple(ws)
                break
        self.pool.append(ws)
        if self.spare:
            handed = (out[0],) + (tuple(out[1]) if len(out) == 3 else ())
            for bufs, (_, _, position) in zip(self.spare, self.out_types):
                bufs.append(handed[position])
                if len(bufs) > self.KEEP:
                    del bufs[0]
        return out[0] if len(out) == 2 else out[:-1]

    def _workspace(self):
        """A new workspace: the buffers of fixed shape allocated (zeroed, as the function would),
        the others empty until the function makes them."""
        from .native_runtime import mark_huge_pages
        return tuple(np.empty((0,) * nd, dtype=dt) if fixed is None else mark_huge_pages(np.zeros(fixed, dtype=dt))
                     for dt, nd, fixed in self.types)

    def _compile_here(self, args):
        """The first call in this process: a progress line if compiling takes a while, and the
        marker once the machine code is in the cache."""
        done = threading.Event()
        started = time.perf_counter()
        lines = self.source[0].count("\n")
        timer = threading.Timer(PROGRESS_AFTER, lambda: done.is_set() or progress(
            f"compiling native code for {self.fn.__name__} ({lines} lines)..."))
        timer.daemon = True
        timer.start()
        try:
            out = self.fn(*args) if self.serial is None else self._first(args)
        finally:
            done.set()
            timer.cancel()
        seconds = time.perf_counter() - started
        if seconds > PROGRESS_AFTER:
            progress(f"native code for {self.fn.__name__} compiled in {seconds:.1f} s")
        _touch(self.marker)
        self.marker = ""
        return out

    def wait(self):
        """Block until another process compiling this kernel has finished (one still waiting for
        its turn starts at a later call)."""
        if self.compiling is not None:
            self.compiling.wait()

    def release(self):
        self.pool.clear()
        for bufs in self.spare:
            bufs.clear()


_warm_up = None


def warm_up():
    """Start, once per process, what the first native call needs whatever the program is, on a
    background thread: hashing flowgrad's source (``program_key``) and compiling Numba's runtime
    (its memory-management functions, 0.05-0.14 s measured in a new process). Both run mostly
    outside the GIL (file reads, hashing, LLVM), so they overlap capturing the first program."""
    global _warm_up
    if _warm_up is not None:
        return
    _warm_up = threading.Thread(target=_prepare_process, name="flowgrad-warm-up", daemon=True)
    _warm_up.start()
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(before=_warm_up.join)      # never fork with LLVM mid-compile


def _prepare_process():
    try:
        _code_digest()
        from numba.core.compiler_lock import global_compiler_lock
        from numba.core.registry import cpu_target
        from numba.core.runtime import nrt
        with global_compiler_lock:
            nrt.rtsys.initialize(cpu_target.target_context)
    except Exception:                           # noqa: BLE001 - the first call does it, or says what is wrong
        pass


def _load_cached(dispatcher, types):
    """Load the machine code of Numba ``dispatcher`` for ``types`` from its disk cache, as its
    ``compile`` does, but without first loading every typing and lowering registry of Numba's
    target (``refresh``: a third of a second in a new process, measured; compiled code does not
    need them, and a compile in this process later loads them itself). Returns whether it loaded;
    where it did not, the first call loads or compiles the usual way."""
    try:
        from numba.core.compiler_lock import global_compiler_lock
        from numba.core.runtime import nrt
        cache = getattr(dispatcher, "_cache", None)
        if cache is None or not hasattr(cache, "_load_overload"):
            return False
        with global_compiler_lock:
            if tuple(types) in dispatcher.overloads:
                return True
            ctx = dispatcher.targetctx
            nrt.rtsys.initialize(ctx)           # the runtime's symbols, before code that calls them is linked
            cres = cache._load_overload(tuple(types), ctx)
            if cres is None or cres.objectmode:
                return False
            ctx.insert_user_function(cres.entry_point, cres.fndesc, [cres.library])
            dispatcher.add_overload(cres)
            dispatcher._cache_hits[tuple(types)] += 1
        return True
    except Exception:                           # noqa: BLE001 - Numba's own path loads it, or says what is wrong
        return False


def _touch(path):
    try:
        with open(path, "w", opener=lambda p, flags: os.open(p, flags, 0o600)):
            pass
    except OSError:
        pass


def _compile_elsewhere(source, name, types, marker):
    """A process compiling ``name`` of ``source`` for ``types`` into the cache (``native_compile``)."""
    proc = subprocess.Popen([sys.executable, "-m", "flowgrad.backends.native_compile"], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=os.environ.copy())
    proc.stdin.write(pickle.dumps((source[0], source[1], name, types, marker)))
    proc.stdin.close()
    proc.started, proc.marker = time.perf_counter(), marker
    return proc


@functools.cache
def _fp_functions():
    """``native_math``'s ``(fp_mode, restore_fp_mode)``, imported at the first call that needs them
    (an import statement costs a microsecond per call)."""
    from .native_math import fp_mode, restore_fp_mode
    return fp_mode, restore_fp_mode


def _unheld(a):
    """Whether nothing but the kernel's list refers to ``a`` or to the memory under it. A view
    of ``a`` refers to what owns the memory (NumPy collapses chains of views), here the record
    Numba keeps for the memory it allocated, which only ``a`` should hold."""
    return sys.getrefcount(a) == 3 and (a.base is None or sys.getrefcount(a.base) == 2)


def cache_dir() -> str:
    """The directory compiled code is cached in (``FLOWGRAD_CACHE_DIR``, else ``~/.cache/flowgrad``),
    made private (mode 0700) where flowgrad creates it. flowgrad imports Python source from it (the
    generated source of a program it captured before, signed with a key kept there), and Numba
    loads its cached machine code (pickled) from it: one that another user can write could run
    their code in this process, so it is refused (``_check_private``)."""
    base = os.environ.get("FLOWGRAD_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "flowgrad")
    numba_cache = os.path.join(base, "__pycache__")        # Numba's cache index and machine code
    os.makedirs(base, mode=0o700, exist_ok=True)
    os.makedirs(numba_cache, mode=0o700, exist_ok=True)    # made here, not by Numba, whatever the umask
    _check_private(base)
    _check_private(numba_cache)
    return base


def _check_private(path):
    """Refuse a cache directory that is not this user's own, or that others can write to."""
    if not hasattr(os, "getuid") or not os.path.isdir(path):
        return
    import stat
    from ..errors import FlowgradError
    st = os.stat(path)
    if st.st_uid != os.getuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise FlowgradError(
            f"flowgrad's cache directory {path} is {'not yours' if st.st_uid != os.getuid() else 'writable by others'} "
            f"(owner uid {st.st_uid}, mode {stat.filemode(st.st_mode)}): code placed there would run in this "
            "process when flowgrad loads its compiled programs. Point FLOWGRAD_CACHE_DIR at a directory of your "
            "own that only you can write (chmod 700), or leave it unset (~/.cache/flowgrad)")


@functools.lru_cache(maxsize=None)
def _runtime_digest() -> str:
    """A hash of the runtime modules the generated code calls. Numba's cached machine code of a
    generated function holds the runtime's functions compiled into it (the element functions are
    instructions of its loops), so a changed runtime must not reuse it."""
    from . import linalg_runtime, native_linalg, native_math, native_runtime
    digest = hashlib.sha256()
    for module in (native_runtime, native_math, native_linalg, linalg_runtime):
        with open(module.__file__, "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()


@functools.lru_cache(maxsize=None)
def _code_digest() -> str:
    """A hash of flowgrad's own source: generated source kept on disk (``load_program``) is of the
    passes and code generation that wrote it."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    digest = hashlib.sha256()
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = sorted(d for d in subfolders if d != "__pycache__")
        for name in sorted(f for f in files if f.endswith(".py")):
            path = os.path.join(folder, name)
            digest.update(os.path.relpath(path, root).encode() + b"\0")
            with open(path, "rb") as f:
                digest.update(f.read())
    return digest.hexdigest()


def program_key(data: bytes) -> str:
    """The key of a program's generated source on disk: ``data`` (the captured program and the
    options, pickled by the caller), flowgrad's source, and the versions of Python and NumPy."""
    from .. import __version__
    digest = hashlib.sha256(f"{__version__}\0{np.__version__}\0{sys.version_info[:2]}\0{_code_digest()}\0".encode())
    digest.update(data)
    return digest.hexdigest()[:32]


@functools.lru_cache(maxsize=None)
def _signing_key(directory) -> bytes:
    """The secret that signs the generated source kept in ``directory`` (made once, readable by
    its owner only): a file flowgrad did not write there is never run as a program's source."""
    path = os.path.join(directory, "program-signing.key")
    secret = _read_bytes(path)
    if not secret:
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "wb", opener=lambda p, flags: os.open(p, flags, 0o600)) as f:
            f.write(secrets.token_bytes(32))
        try:
            os.link(tmp, path)                  # the first process to make it wins; the others read it
        except FileExistsError:
            if not _read_bytes(path):           # an empty file: replaced
                os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        secret = _read_bytes(path)
    return secret


def _read_bytes(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def _signature(directory, key, body):
    return hmac.new(_signing_key(directory), f"{key}\0{body}".encode(), hashlib.sha256).hexdigest()


def load_program(key, kind="program"):
    """What ``store_program`` kept under ``key`` (a dict), or None: absent, unreadable, or not
    signed by this cache's key."""
    directory = cache_dir()
    try:
        with open(os.path.join(directory, f"flowgrad_{kind}_{key}.json")) as f:
            entry = json.load(f)
        body = entry["body"]
        if not hmac.compare_digest(str(entry["signature"]), _signature(directory, key, body)):
            return None
        return json.loads(body)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def store_program(key, value, kind="program"):
    """Keep ``value`` (a JSON-able dict: a program's generated source and what calling it needs;
    ``kind="plan"``: the schedules a plan chose for it) under ``key``, signed, written atomically."""
    directory = cache_dir()
    try:
        body = json.dumps(value, sort_keys=True)
    except (TypeError, ValueError):
        return
    path = os.path.join(directory, f"flowgrad_{kind}_{key}.json")
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w", opener=lambda p, flags: os.open(p, flags, 0o600)) as f:
            json.dump({"signature": _signature(directory, key, body), "body": body}, f)
        os.replace(tmp, path)
    except OSError:
        pass


def compile_source(src: str, name: str):
    """Write generated source to the cache (atomically, named by its hash) and import ``name`` from
    it. A function with parallel loops keeps a way to its one-thread version (see ``Kernel``)."""
    serial = None
    if "\n@_jit_parallel\n" in src:
        one = src.replace("\n@_jit_parallel\n", "\n@_jit\n").replace("numba.prange(", "range(")
        serial = lambda: compile_source(one, name)     # noqa: E731
    import numba
    from .. import __version__
    key = hashlib.sha256(f"{src}\0{__version__}\0{_runtime_digest()}\0{np.__version__}\0{numba.__version__}"
                         .encode()).hexdigest()[:24]
    modname = f"flowgrad_gen_{key}"
    path = os.path.join(cache_dir(), modname + ".py")
    if _read(path) != src:          # absent, or not the source generated here: (re)written, never run
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", opener=lambda p, flags: os.open(p, flags, 0o600)) as f:
            f.write(src)
        os.replace(tmp, path)
    mod = sys.modules.get(modname)
    if mod is None:
        # run the source generated here (the file on disk only names it, for Numba's cache), not
        # whatever the file or a bytecode file next to it holds
        spec = importlib.util.spec_from_file_location(modname, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[modname] = mod
        try:
            exec(compile(src, path, "exec"), mod.__dict__)  # noqa: S102 - our own generated source
        except BaseException:
            del sys.modules[modname]
            raise
    return Kernel(getattr(mod, name), getattr(mod, "WORKSPACE_" + name), getattr(mod, "OUTPUTS_" + name), serial,
                  getattr(mod, "SITES_" + name, ()), (src, path), getattr(mod, "FLUSHES_" + name, False))


def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def available() -> bool:
    return importlib.util.find_spec("numba") is not None
