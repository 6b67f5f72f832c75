"""The IR: ``core`` (containers, references, expressions, statements) and the elementwise
primitives' declarations (``elements``), whose tables ``core`` presents."""
from . import core  # noqa: F401  (first: ``elements`` builds on it, ``core`` reads it back)
