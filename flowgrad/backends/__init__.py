"""Backends: the IR as generated source (``numpy``: vectorised NumPy; ``native``: Numba loop nests)."""


class Located:
    """Mixed into a code generator: ``loc`` is the user's line of the statement being emitted
    (the innermost one that has a line), which run-time errors name. The generator's own
    ``_stmt`` emits one statement."""

    loc = None

    def stmt(self, s, ind):
        outer = self.loc
        self.loc = getattr(s, "loc", None) or outer
        try:
            self._stmt(s, ind)
        finally:
            self.loc = outer
