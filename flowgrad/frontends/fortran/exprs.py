"""Fortran expressions into IR expressions, with Fortran's semantics.

Values are IR expressions whose axes run in reverse Fortran order (see ``scope``). Types
follow Fortran, not NumPy: an integer operand meets a real one as that real kind, single and
double precision mix as double, a literal keeps its own kind (``0.7`` is single precision
even in a double expression). Integer division truncates toward zero, ``MOD`` takes the
dividend's sign and ``MODULO`` the divisor's. Constant subexpressions are folded with NumPy in
their own dtype, so ``PARAMETER``s and kinds are plain constants.
"""
from __future__ import annotations

import numpy as np

from ...errors import unsupported
from ...ir.core import BOOL, I64, Assign, Const, Expr, For, Index, Op, Read, Ref, Slice, const_value, op
from .scope import Absent, ArrayView, Value, Var
from .source import _fparser
from .types import real_literal


# ---------------------------------------------------------------- folding and conversion

def fold(e):
    """``e`` with an elementwise node over constants replaced by its value (NumPy, in the node's
    dtype); anything else unchanged."""
    if not isinstance(e, Op) or not all(isinstance(a, Const) for a in e.args):
        return e
    fn = getattr(np, e.name, None)
    if fn is None:
        return e
    args = [np.dtype(a.dtype).type(a.value) for a in e.args]
    try:
        with np.errstate(all="ignore"):
            value = fn(*args)
    except (ValueError, TypeError, ZeroDivisionError, OverflowError):
        return e
    value = np.asarray(value).astype(e.dtype)[()]
    return Const(value, e.dtype, weak=False)


def mk(name, *args):
    """``op`` followed by ``fold``."""
    return fold(op(name, *args))


def const(value, dtype=None):
    if dtype is not None:
        return Const(np.dtype(dtype).type(value), dtype, weak=False)
    if isinstance(value, (bool, np.bool_)):
        return Const(bool(value), BOOL, weak=False)
    if isinstance(value, (int, np.integer)):
        return Const(int(value), I64, weak=False)
    return Const(value, weak=False)


def convert(e, dtype, loc=None):
    """``e`` as ``dtype`` (Fortran's conversion on assignment and in mixed operations)."""
    dtype = np.dtype(dtype)
    if e.dtype == dtype:
        return e
    if (e.dtype == BOOL) != (dtype == BOOL):
        raise unsupported(loc, "conversion between LOGICAL and numeric values", "compare or use MERGE")
    return mk(dtype.name, e)


def numeric_type(*dtypes):
    """The type of a mixed numeric operation: real beats integer, double beats single."""
    reals = [np.dtype(d) for d in dtypes if np.dtype(d).kind == "f"]
    if reals:
        return max(reals, key=lambda d: d.itemsize)
    return I64


def int_div(a, b):
    """Fortran's integer division: the quotient truncated toward zero."""
    a, b = _as(a), _as(b)
    vb = const_value(b)
    if vb is not None and vb > 0:
        va = const_value(a)
        if va is not None:
            return const(int(va / vb) if abs(va) < 2 ** 52 else (abs(va) // vb) * (1 if va >= 0 else -1))
        if vb == 1:
            return a
        return mk("multiply", mk("sign", a), mk("floor_divide", mk("abs", a), b))
    return mk("multiply", mk("multiply", mk("sign", a), mk("sign", b)),
              mk("floor_divide", mk("abs", a), mk("abs", b)))


def fortran_mod(a, p):
    """MOD: ``a - INT(a / p) * p``, with the sign of ``a``."""
    return mk("multiply", mk("sign", a), mk("mod", mk("abs", a), mk("abs", p)))


def _as(x):
    from ...ir.core import as_expr
    return as_expr(x)


_RELATIONAL = {"==": "equal", ".EQ.": "equal", "/=": "not_equal", ".NE.": "not_equal", "<": "less",
               ".LT.": "less", "<=": "less_equal", ".LE.": "less_equal", ">": "greater", ".GT.": "greater",
               ">=": "greater_equal", ".GE.": "greater_equal"}
_LOGICAL = {".AND.": "logical_and", ".OR.": "logical_or", ".EQV.": "equal", ".NEQV.": "not_equal"}


class Text:
    """A character constant (only passed along: to ``SELECT CASE``, optional flags, messages)."""

    def __init__(self, value):
        self.value = value


class ExprLowering:
    """Expression lowering, mixed into the ``Lowering``."""

    # ------------------------------------------------------------ entry points

    def ex(self, node):
        """The value of an expression node."""
        F = _fparser()[2]
        handler = getattr(self, "ex_" + type(node).__name__, None)
        if handler is not None:
            return handler(node)
        if isinstance(node, F.BinaryOpBase):
            return self.binary(node)
        if isinstance(node, F.UnaryOpBase):
            return self.unary(node)
        raise unsupported(self.loc, f"expression {type(node).__name__} ({str(node)[:40]})",
                          "rewrite it with supported operations")

    def value(self, node):
        """An expression's value that must be numeric or logical data (not text)."""
        v = self.ex(node)
        if isinstance(v, Text):
            raise unsupported(self.loc, f"character value {str(node)[:30]} in a computation",
                              "strings can only be passed along or printed")
        return v

    def int_value(self, node):
        v = self.value(node)
        if v.shape != ():
            raise unsupported(self.loc, f"array {node} where a scalar integer is needed", "use a scalar")
        if v.dtype.kind == "f":
            raise unsupported(self.loc, f"real value {node} used as an integer", "convert it with INT or NINT")
        return v

    # ------------------------------------------------------------ literals

    def ex_Int_Literal_Constant(self, node):
        return const(int(node.children[0]))

    def ex_Real_Literal_Constant(self, node):
        text, kind = node.children
        k = None
        if kind is not None:
            k = int(kind) if str(kind).isdigit() else self.kind_value(str(kind))
        value, dtype = real_literal(str(text), k, self.loc)
        return const(value, dtype)

    ex_Signed_Int_Literal_Constant = ex_Int_Literal_Constant
    ex_Signed_Real_Literal_Constant = ex_Real_Literal_Constant

    def ex_Logical_Literal_Constant(self, node):
        return const(str(node.children[0]).upper() == ".TRUE.")

    def ex_Char_Literal_Constant(self, node):
        text = str(node.children[0])
        return Text(text[1:-1])

    def ex_Complex_Literal_Constant(self, node):
        raise unsupported(self.loc, "COMPLEX constant", "split complex values into real and imaginary parts")

    def ex_Boz_Literal_Constant(self, node):
        raise unsupported(self.loc, "BOZ constant", "write the value in decimal")

    def kind_value(self, name):
        v = self.lookup(name.lower())
        if isinstance(v, Value) and const_value(v.expr) is not None:
            return int(const_value(v.expr))
        raise unsupported(self.loc, f"kind {name}", "a kind must be an integer PARAMETER")

    # ------------------------------------------------------------ operators

    def ex_Parenthesis(self, node):
        return self.ex(node.children[1])

    def binary(self, node):
        lhs, opname, rhs = node.children
        opname = str(opname).upper()
        a = self.ex(lhs)
        if isinstance(a, Text):
            return self.text_compare(opname, a, self.ex(rhs))
        if opname in (".AND.", ".OR.") and isinstance(fold(a), Const) and a.dtype == BOOL:
            # decided by its left side when captured: PRESENT(x) .AND. x > 0 never reads an absent x
            if fold(a).value == (opname == ".OR."):
                return fold(a)
            b = self.value(rhs)
            if b.dtype != BOOL:
                raise unsupported(self.loc, f"{opname} of non-LOGICAL values", "compare them first")
            return b
        b = self.value(rhs)
        return self.apply_binary(opname, a, b)

    def text_compare(self, opname, a, b):
        """A comparison of character constants, decided when captured (a mode flag passed as a
        literal: ``IF (CDMODE == 'TL')``)."""
        if not isinstance(b, Text) or opname not in ("==", ".EQ.", "/=", ".NE."):
            raise unsupported(self.loc, f"character operation {opname}", "only comparisons of constants are "
                              "supported")
        same = a.value.rstrip() == b.value.rstrip()
        return const(same if opname in ("==", ".EQ.") else not same)

    def apply_binary(self, opname, a, b):
        loc = self.loc
        if opname in ("+", "-", "*", "/"):
            self._numeric(a, b, opname)
            dt = numeric_type(a.dtype, b.dtype)
            a, b = convert(a, dt, loc), convert(b, dt, loc)
            if opname == "/":
                return int_div(a, b) if dt == I64 else mk("divide", a, b)
            return mk({"+": "add", "-": "subtract", "*": "multiply"}[opname], a, b)
        if opname == "**":
            self._numeric(a, b, opname)
            return self.power(a, b)
        if opname in _RELATIONAL:
            if a.dtype == BOOL or b.dtype == BOOL:
                raise unsupported(loc, f"LOGICAL values compared with {opname}", "use .EQV. or .NEQV.")
            dt = numeric_type(a.dtype, b.dtype)
            return mk(_RELATIONAL[opname], convert(a, dt, loc), convert(b, dt, loc))
        if opname in _LOGICAL:
            if a.dtype != BOOL or b.dtype != BOOL:
                raise unsupported(loc, f"{opname} of non-LOGICAL values", "compare them first")
            return mk(_LOGICAL[opname], a, b)
        if opname == "//":
            raise unsupported(loc, "character concatenation (//)", "strings cannot be computed with")
        raise unsupported(loc, f"operator {opname}", "user-defined operators are not supported")

    def _numeric(self, a, b, opname):
        if a.dtype == BOOL or b.dtype == BOOL:
            raise unsupported(self.loc, f"LOGICAL operand of {opname}", "use .AND., .OR., .NOT.")

    def power(self, a, b):
        """``a ** b``: an integer exponent keeps the base's type (``x ** 2`` is ``x * x``)."""
        if b.dtype == I64:
            if a.dtype == I64:
                vb = const_value(b)
                if vb is not None and vb < 0:
                    # 1 / a**|b| truncated: 0 unless |a| == 1
                    return mk("where", mk("equal", mk("abs", a), 1),
                              mk("where", mk("equal", mk("mod", const(-vb), 2), 0), const(1), a), const(0))
                if vb is None:
                    b = mk("maximum", b, 0)
                return mk("power", a, b)
            vb = const_value(b)
            if vb == 2:
                return mk("square", a)          # x * x, as gfortran computes x ** 2
            if vb == 1:
                return a
            if vb is not None and 0 <= vb <= 64:
                return mk("power", a, Const(float(vb), a.dtype, weak=False))
            # a negative base keeps its sign for odd exponents: power in the base's dtype
            return mk("power", a, convert(b, a.dtype))
        dt = numeric_type(a.dtype, b.dtype)
        return mk("power", convert(a, dt), convert(b, dt))

    def unary(self, node):
        opname, operand = node.children
        opname = str(opname).upper()
        v = self.value(operand)
        if opname == "-":
            if v.dtype == BOOL:
                raise unsupported(self.loc, "negative LOGICAL", "use .NOT.")
            return mk("negative", v)
        if opname == "+":
            return v
        if opname == ".NOT.":
            if v.dtype != BOOL:
                raise unsupported(self.loc, ".NOT. of a non-LOGICAL value", "compare it first")
            return mk("logical_not", v)
        raise unsupported(self.loc, f"operator {opname}", "user-defined operators are not supported")

    # ------------------------------------------------------------ names and designators

    def ex_Name(self, node):
        name = str(node).lower()
        b = self.lookup(name, create=True)
        return self.read_binding(b, name)

    def read_binding(self, b, name):
        if isinstance(b, Value):
            return b.expr
        if isinstance(b, Var):
            if b.is_record:
                raise unsupported(self.loc, f"derived-type variable {name} used as a value",
                                  "use its components")
            if b.is_array:
                if b.view is None:
                    raise unsupported(self.loc, f"array {name} used before it is allocated",
                                      "ALLOCATE it first")
                return Read(b.view.ref())
            return Read(b.ref)
        if isinstance(b, Absent):
            raise unsupported(self.loc, f"absent OPTIONAL argument {name}", "test it with PRESENT first")
        if b is None:
            proc = self.find_procedure(name)
            if proc is not None:
                raise unsupported(self.loc, f"procedure {name} passed as a value", "call it instead")
            raise unsupported(self.loc, f"undeclared name {name} (IMPLICIT NONE)", "declare it")
        raise unsupported(self.loc, f"name {name} used as a value", "it is not a variable")

    def ex_Part_Ref(self, node):
        name = str(node.children[0]).lower()
        b = self.lookup(name, create=False)
        if isinstance(b, Var) and b.is_array:
            return self.read_designator(node)
        if isinstance(b, Var) and b.is_record:
            raise unsupported(self.loc, f"array of derived type {name}", "use arrays as components instead")
        if isinstance(b, Value) and b.expr.shape != ():
            return self.read_designator(node)
        args = node.children[1]
        return self.function_call(name, args.children if args is not None else (), node)

    def ex_Function_Reference(self, node):
        args = node.children[1]
        if isinstance(node.children[0], _fparser()[2].Procedure_Designator):
            obj, _, binding = node.children[0].children
            return self.bound_call(obj, str(binding).lower(), args.children if args is not None else (), "function")
        name = str(node.children[0]).lower()
        return self.function_call(name, args.children if args is not None else (), node)

    def ex_Intrinsic_Function_Reference(self, node):
        name = str(node.children[0]).lower()
        b = self.lookup(name, create=False)
        if isinstance(b, Var) and b.is_array:
            return self.read_designator(node)
        args = node.children[1]
        return self.function_call(name, args.children if args is not None else (), node)

    def ex_Structure_Constructor(self, node):
        # fparser reads f(x) as a structure constructor where f is unknown to it
        name = str(node.children[0]).lower()
        args = node.children[1]
        return self.function_call(name, args.children if args is not None else (), node)

    def ex_Data_Ref(self, node):
        return self.read_designator(node)

    def read_designator(self, node):
        kind, target = self.designate(node)
        if kind == "view":
            return Read(target.ref())
        if kind == "elem":
            return Read(target)
        if kind == "value":
            return target
        raise unsupported(self.loc, f"derived-type value {node}", "use its components")

    def designate(self, node, write=False):
        """What a variable reference names: ``("elem", Ref)`` a scalar, ``("view", ArrayView)``
        an array or section, ``("record", Var)`` a derived-type variable, ``("value", Expr)`` a
        constant or (read) an array with vector subscripts, ``("vector", (view, subscripts))`` an
        array with vector subscripts being assigned (``write``)."""
        F = _fparser()[2]
        if isinstance(node, F.Name):
            name = str(node).lower()
            b = self.lookup(name, create=True)
            return self._whole(b, name)
        if isinstance(node, F.Parenthesis):
            return "value", self.value(node)
        if isinstance(node, (F.Part_Ref, F.Intrinsic_Function_Reference)):
            name = str(node.children[0]).lower()
            b = self.lookup(name, create=False)
            if isinstance(b, Value) and b.expr.shape != ():
                b = self.const_view(b)
            if not (isinstance(b, Var) and b.is_array):
                return "value", self.value(node)
            return self._subscript(b, name, node.children[1], write)
        if isinstance(node, F.Data_Ref):
            parts = node.children
            kind, target = self.designate(parts[0])
            for k, part in enumerate(parts[1:], 1):
                if kind != "record":
                    raise unsupported(self.loc, f"component {part} of a non-derived-type value {parts[0]}",
                                      "check the declaration")
                comp = str(part.children[0] if isinstance(part, F.Part_Ref) else part).lower()
                if comp not in target.fields and k == len(parts) - 1 and not write and isinstance(part, F.Part_Ref):
                    # fparser reads X%F(A) as a component; F may be a function the type binds
                    obj = parts[0] if k == 1 else F.Data_Ref(" % ".join(str(p) for p in parts[:k]))
                    args = part.children[1]
                    return "value", self.bound_call(obj, comp, args.children if args is not None else (),
                                                    "function")
                if comp not in target.fields:
                    raise unsupported(self.loc, f"component {comp} of {target.name}",
                                      f"TYPE({target.tspec.derived}) has no such component")
                field = self.ensure_field(target, comp)
                if isinstance(part, F.Part_Ref):
                    kind, target = self._subscript(field, f"{target.name}%{comp}", part.children[1], write)
                else:
                    kind, target = self._whole(field, comp)
            return kind, target
        return "value", self.value(node)

    def _whole(self, b, name):
        if isinstance(b, Value):
            return "value", b.expr
        if isinstance(b, Var):
            if b.is_record:
                return "record", b
            if b.is_array:
                if b.view is None:
                    raise unsupported(self.loc, f"array {name} used before it is allocated", "ALLOCATE it first")
                return "view", b.view
            return "elem", b.ref
        self.read_binding(b, name)      # raises the right error

    def _subscript(self, var, name, subs, write=False):
        F = _fparser()[2]
        view = var.view
        if view is None:
            raise unsupported(self.loc, f"array {name} used before it is allocated", "ALLOCATE it first")
        items = subs.children if subs is not None else ()
        if len(items) != view.rank:
            raise unsupported(self.loc, f"{name} indexed with {len(items)} subscripts",
                              f"it has {view.rank} dimensions")
        out, section, vector = [], False, False
        for sub in items:
            if isinstance(sub, F.Subscript_Triplet):
                lo, hi, st = sub.children
                out.append(("r", None if lo is None else self.int_value(lo),
                            None if hi is None else self.int_value(hi), None if st is None else self.int_value(st)))
                section = True
            else:
                v = self.value(sub)
                if v.dtype.kind == "f":
                    raise unsupported(self.loc, f"real subscript {sub}", "subscripts must be integers")
                if v.shape != ():
                    if len(v.shape) != 1 or v.dtype.kind == "b":
                        raise unsupported(self.loc, f"subscript {sub} of {name}", "a vector subscript is a rank-1 "
                                          "INTEGER array")
                    v = self.whole(v)
                    if not v.ref.is_whole():
                        v = self.materialize(v, "idx")
                    out.append(("v", v))
                    vector = True
                    continue
                out.append(("i", v))
        if vector:
            return ("vector", (view, out)) if write else ("value", self.gather(view, out))
        if section:
            return "view", view.section(out)
        return "elem", view.element([s[1] for s in out])

    def _vector_loops(self, subs, body):
        """For loops over the positions of the vector subscripts (the first innermost) around the
        statements ``body(subscripts with each vector replaced by its element, counters)``."""
        counters = {k: self.temp("iv", I64, ()) for k, s in enumerate(subs) if s[0] == "v"}
        plain = [("i", Read(Ref(s[1].ref.container, [Index(Read(Ref(counters[k], ())))]))) if s[0] == "v" else s
                 for k, s in enumerate(subs)]
        self.loop_vars.update(counters.values())
        try:
            stmts = body(plain, counters)
        finally:
            self.loop_vars.difference_update(counters.values())
        for k in sorted(counters, reverse=True):
            n = subs[k][1].shape[0]
            stmts = [For(counters[k], const(0), n, const(1), stmts, loc=self.loc)]
        for st in stmts:
            self.emit(st)

    def gather(self, view, subs):
        """The value of ``a(idx, ...)``: the elements the vector subscripts name, by loops."""
        section = view.section([("r", None, None, None) if s[0] == "v" else s for s in subs])
        vec_dims = [k for k, s in enumerate(subs) if s[0] != "i"]
        extents = []
        r = 0
        for k in vec_dims:
            extents.append(subs[k][1].shape[0] if subs[k][0] == "v" else section.extents[r])
            r += 1
        out = self.temp("gathered", view.container.dtype, tuple(reversed(extents)))

        def body(plain, counters):
            src = view.section(plain)
            items = []
            for k, ext in zip(reversed(vec_dims), reversed(extents)):
                items.append(Index(Read(Ref(counters[k], ()))) if k in counters else Slice(0, ext, 1))
            return [Assign(Ref(out, items), Read(src.ref()) if src.rank else Read(src.element([])), loc=self.loc)]
        self._vector_loops(subs, body)
        return Read(Ref(out))

    def scatter(self, view, subs, value):
        """``a(idx, ...) = value``, by loops over the vector subscripts."""
        vec_dims = [k for k, s in enumerate(subs) if s[0] != "i"]
        src = None
        if value.shape != ():
            src = self.whole(value)
            if src.ref.perm is not None or not src.ref.is_whole():
                src = self.materialize(src, "t")

        def body(plain, counters):
            dst = view.section(plain)
            v = value
            if src is not None:
                items = []
                for axis, k in enumerate(reversed(vec_dims)):
                    items.append(Index(Read(Ref(counters[k], ()))) if k in counters
                                 else Slice(0, src.shape[axis], 1))
                v = Read(Ref(src.ref.container, items))
            ref = dst.ref() if dst.rank else dst.element([])
            return [Assign(ref, convert(v, view.container.dtype, self.loc), loc=self.loc)]
        self._vector_loops(subs, body)

    def const_view(self, b):
        """A constant array (a ``PARAMETER``) as a read-only variable."""
        return Var("const", None, view=ArrayView.whole(b.expr.ref.container), readonly=True)

    # ------------------------------------------------------------ array constructors

    def ex_Array_Constructor(self, node):
        F = _fparser()[2]
        values = node.children[1]
        dtype = None
        if isinstance(values, F.Ac_Spec):           # [real(8) :: 1, 2, 3]
            tnode, values = values.children
            if tnode is not None:
                dtype = self.tspec(self.frame, tnode).dtype(self.loc)
        items = values.children if values is not None else ()
        pieces = []
        for item in items:
            if isinstance(item, F.Ac_Implied_Do):
                pieces.extend(self.implied_do(item))
            else:
                pieces.append(self.value(item))
        if dtype is not None:
            pieces = [convert(p, dtype, self.loc) for p in pieces]
        return self.construct(pieces)

    def implied_do(self, node):
        """The values of ``(expr, i = lo, hi[, step])`` with constant bounds, unrolled."""
        F = _fparser()[2]
        values, control = node.children
        var, bounds = control.children[0], control.children[1]
        lo, hi = (const_value(self.int_value(b)) for b in bounds[:2])
        st = const_value(self.int_value(bounds[2])) if len(bounds) > 2 else 1
        if lo is None or hi is None or st is None:
            raise unsupported(self.loc, "implied DO with bounds known only at run time",
                              "fill the array with a DO loop")
        name = str(var).lower()
        out = []
        saved = self.frame.bindings.get(name)
        try:
            for i in range(lo, hi + (1 if st > 0 else -1), st):
                self.frame.bindings[name] = Value(const(i))
                for item in values.children:
                    if isinstance(item, F.Ac_Implied_Do):
                        out.extend(self.implied_do(item))
                    else:
                        out.append(self.value(item))
        finally:
            if saved is None:
                self.frame.bindings.pop(name, None)
            else:
                self.frame.bindings[name] = saved
        return out

    def construct(self, pieces):
        """A rank-1 array of the values (scalars, and arrays in array element order)."""
        if not pieces:
            raise unsupported(self.loc, "empty array constructor", "give the type: [real :: ]")
        dt = numeric_type(*[p.dtype for p in pieces]) if all(p.dtype != BOOL for p in pieces) else BOOL
        if all(isinstance(p, Const) for p in pieces):
            return self.const_array(np.array([p.value for p in pieces], dtype=dt))
        sizes = []
        for p in pieces:
            n = const(1)
            for d in p.shape:
                n = mk("multiply", n, d)
            sizes.append(n)
        total = const(0)
        for n in sizes:
            total = mk("add", total, n)
        c = self.temp("array", dt, (total,))
        at = const(0)
        for p, n in zip(pieces, sizes):
            if p.shape == ():
                        self.emit(Assign(Ref(c, [Index(at)]), convert(p, dt), loc=self.loc))
            else:
                flat = self.ravel(convert(p, dt))
                self.emit(Assign(Ref(c, [Slice(at, n, 1)]), flat, loc=self.loc))
            at = mk("add", at, n)
        return Read(Ref(c))

    def ravel(self, e):
        """A rank-1 value of ``e``'s elements in Fortran's array element order (the container's
        C order, as axes run reversed)."""
        if len(e.shape) <= 1:
            return e
        from ...ir.core import Call
        e = self.whole(e)
        if e.ref.perm is not None or not e.ref.is_whole():
            e = self.materialize(e, "t")
        n = const(1)
        for d in e.shape:
            n = mk("multiply", n, d)
        out = self.temp("ravel", e.dtype, (n,))
        self.emit(Call("reshape", [e], [out], {"shape": out.shape}, loc=self.loc))
        return Read(Ref(out))



def is_scalar(e):
    return isinstance(e, Expr) and e.shape == ()
