"""gfortran builds of Fortran sources, called through ctypes like flowgrad's program.

``Gfortran(prog, sources)`` compiles the sources with ``gfortran -cpp -fPIC -shared`` (``-O0``
unless told otherwise) into a temporary directory, once per content, and calls ``prog``'s entry
by reference with the same convention as ``prog`` (f2py's index convention, the written dummies
returned, a function's result first). The tests use it as the oracle and the benchmark as the
baseline.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import tempfile

import numpy as np

_BUILD = os.path.join(tempfile.gettempdir(), f"flowgrad-gfortran-{os.getuid()}")
_CTYPES = {np.dtype(np.float64): ctypes.c_double, np.dtype(np.float32): ctypes.c_float,
           np.dtype(np.int32): ctypes.c_int32, np.dtype(np.int64): ctypes.c_int64}


def _texts(sources):
    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    out = []
    for k, s in enumerate(sources):
        s = os.fspath(s)
        if "\n" in s or not os.path.exists(s):
            out.append((f"src{k}.F90" if _free(s) else f"src{k}.F", s))
        else:
            with open(s) as f:
                out.append((os.path.basename(s), f.read()))
    return out


def _free(text):
    from fparser.common.sourceinfo import get_source_info_str
    return get_source_info_str(text).is_free or any(len(line) > 72 and line[:1] not in "cC*!"
                                                     for line in text.splitlines())


def compile_library(sources, include_dirs=(), defines=None, flags=("-O0",)):
    """The path of a shared library of ``sources`` (built once per content)."""
    texts = _texts(sources)
    h = hashlib.sha256(repr((texts, tuple(map(str, include_dirs)), sorted((defines or {}).items()),
                             tuple(flags))).encode()).hexdigest()[:16]
    out = os.path.join(_BUILD, h)
    lib = os.path.join(out, "lib.so")
    if os.path.exists(lib):
        return lib
    os.makedirs(out, exist_ok=True)
    paths = []
    for name, text in texts:
        p = os.path.join(out, name)
        with open(p, "w") as f:
            f.write(text)
        paths.append(p)
    cmd = ["gfortran", "-cpp", *flags, "-fPIC", "-shared", "-fno-range-check", "-J", out,
           *(f"-I{d}" for d in include_dirs),
           *((f"-D{k}" if v is None else f"-D{k}={v}") for k, v in (defines or {}).items())]
    # modules first: a file USEd by another must be compiled before it
    for attempt in range(len(paths) + 1):
        run = subprocess.run(cmd + paths + ["-o", lib + ".tmp"], capture_output=True, text=True, cwd=out)
        if run.returncode == 0:
            break
        if "Cannot open module file" not in run.stderr or attempt == len(paths):
            raise RuntimeError(f"gfortran failed:\n{run.stderr}")
        paths = paths[1:] + paths[:1]
    os.replace(lib + ".tmp", lib)
    return lib


class Gfortran:
    """The gfortran build of ``prog``'s entry, called like ``prog``: ``g(*args)`` returns the
    written dummies (a function's result first) as ``prog`` does."""

    def __init__(self, prog, sources, include_dirs=(), defines=None, flags=("-O0",)):
        self.prog = prog
        self.lib = ctypes.CDLL(compile_library(sources, include_dirs, defines, flags))
        proc = prog.proc
        symbol = f"__{proc.module.name}_MOD_{proc.name}" if proc.module is not None else proc.name + "_"
        self.fn = getattr(self.lib, symbol)
        from flowgrad.frontends.fortran.scope import declarations
        self.decls = declarations(proc).decls
        self.kinds = {}
        for d in proc.dummies:
            dd = self.decls.get(d)
            self.kinds[d] = _dtype_of(prog, proc, dd, d)
        if proc.kind == "function":
            rd = self.decls.get(proc.result)
            tnode = rd.type_node if rd is not None else None
            if tnode is None and proc.prefix is not None:
                tnode = next((p for p in proc.prefix.children if not isinstance(p, str)
                              and type(p).__name__.endswith("Type_Spec")), None)
            self.result_dtype = _dtype_of(prog, proc, None, proc.result, tnode)
            self.fn.restype = _CTYPES[self.result_dtype] if self.result_dtype.kind != "b" else ctypes.c_int32
        else:
            self.fn.restype = None

    def set_module(self, module, name, value):
        """Set module variable ``module.name`` (a scalar or an array) in the library."""
        value = np.asarray(value)
        ct = _CTYPES[value.dtype]
        if value.ndim == 0:
            ct.in_dll(self.lib, f"__{module}_MOD_{name}").value = value.item()
        else:
            arr = (ct * value.size).in_dll(self.lib, f"__{module}_MOD_{name}")
            np.frombuffer(arr, dtype=value.dtype)[:] = np.ravel(value, order="F")

    def __call__(self, *args):
        dummies = self.prog.proc.dummies
        if len(args) > len(dummies):
            raise TypeError(f"the gfortran build of {self.prog.__name__} takes {len(dummies)} arguments "
                            f"({', '.join(dummies)}), not {len(args)}")
        args = tuple(args) + (None,) * (len(dummies) - len(args))     # absent trailing OPTIONAL ones
        keep, ptrs, arrays = [], [], {}
        for d, a in zip(dummies, args):
            dt = self.kinds[d]
            if a is None:
                # the routine would write through a null pointer, and crash the process
                if not (self.decls.get(d) is not None and self.decls[d].optional):
                    raise TypeError(f"argument {d} of the gfortran build of {self.prog.__name__} is missing: "
                                    "pass an array or a number for it, INTENT(OUT) ones too (only OPTIONAL ones "
                                    "may be absent)")
                ptrs.append(None)
                continue
            if np.ndim(a):
                arr = np.asfortranarray(np.array(a, dtype=dt if dt.kind != "b" else np.int32))
                arrays[d] = arr
                keep.append(arr)
                ptrs.append(arr.ctypes.data_as(ctypes.c_void_p))
            else:
                ct = _CTYPES[dt] if dt.kind != "b" else ctypes.c_int32
                box = ct(a)
                arrays[d] = box
                keep.append(box)
                ptrs.append(ctypes.byref(box))
        result = self.fn(*ptrs)
        out = []
        if self.prog.proc.kind == "function":
            out.append(self.result_dtype.type(result))
        for d in self.prog.output_dummies:
            v = arrays[d]
            if isinstance(v, np.ndarray):
                v = v.astype(bool) if self.kinds[d].kind == "b" else v.copy()
                out.append(v)
            else:
                out.append(self.kinds[d].type(v.value))
        return out[0] if len(out) == 1 else tuple(out)


def _dtype_of(prog, proc, dd, name, tnode=None):
    from flowgrad.frontends.fortran.lowering import Frame, Lowering

    class _H:
        def container(self, *a, **k):
            raise AssertionError
    lo = Lowering(prog.library, _H(), None)
    lo.loc = proc.loc()
    frame = Frame(proc, lo.host_frame(proc))
    lo.frame = frame
    ts = lo.tspec(frame, dd.type_node if dd is not None else tnode, name)
    if ts.base == "integer":
        return np.dtype(np.int32 if ts.kind == 4 else np.int64)
    return ts.dtype()
