"""Compile one generated native function into the cache, in a process of its own.

``Kernel`` starts ``python -m flowgrad.backends.native_compile`` and writes to its standard
input the pickled ``(source, path, name, types, marker)``: the generated source and its file in
the cache, the function and the Numba types of its arguments. The process loads the source as the
parent did (``compile_source``: the same file, so that Numba's cache finds the machine code for
the parent), compiles ``name`` for ``types``, which saves the machine code in the cache, and
writes the marker file. It exits with 1 where compiling fails: the parent then compiles itself,
and reports what failed.
"""
from __future__ import annotations

import pickle
import sys


def main():
    source, path, name, types, marker = pickle.loads(sys.stdin.buffer.read())
    from .native_kernel import _touch, compile_source
    try:
        kernel = compile_source(source, name)
        if kernel.source[1] != path:              # another flowgrad or library version than the parent's
            return 1
        kernel.fn.compile(types)
    except Exception:                             # noqa: BLE001 - the parent compiles and reports it
        return 1
    _touch(marker)
    return 0


if __name__ == "__main__":
    sys.exit(main())
