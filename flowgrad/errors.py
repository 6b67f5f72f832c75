"""Exceptions a user can cause. Every message names the user's file and line where known."""
from __future__ import annotations

import os


class FlowgradError(Exception):
    """Base class of every error flowgrad raises on purpose."""


class UnsupportedError(FlowgradError):
    """User code uses a construct or call that flowgrad cannot capture or differentiate."""


class InputError(FlowgradError, ValueError):
    """Bad input at call time: wrong ``wrt``, dtype, result kind or cotangent shape."""


class Loc:
    """A position in user source: file and line."""

    __slots__ = ("filename", "lineno")

    def __init__(self, filename: str, lineno: int):
        self.filename = filename
        self.lineno = lineno

    def __str__(self):
        return f"{os.path.basename(self.filename)}:{self.lineno}"


def unsupported(loc, construct: str, hint: str) -> UnsupportedError:
    """Build the standard error: ``file.py:LINE: unsupported <construct>: <hint>``."""
    where = f"{loc}: " if loc is not None else ""
    return UnsupportedError(f"{where}unsupported {construct}: {hint}")
