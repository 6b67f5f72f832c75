"""Declarations, scopes and where Fortran variables live in the IR.

``declarations(unit)`` reads a specification part once per parse (types, shapes, attributes,
``USE``, ``IMPLICIT``, derived types, interfaces, statement functions). A ``Scope`` resolves a
name as Fortran does: the unit's own declarations and dummies, then its ``USE``d modules, then
its host (the containing procedure, the module). Bindings are made lazily by the lowering.

An array variable is an ``ArrayView``: a container whose axes run in reverse Fortran order
(the container holds the array in column-major order, so that ``a(i, j)`` with ``i`` innermost
walks memory in order), each container axis either fixed at one position or running along one
Fortran dimension from a start with a step. A section or a dummy bound to a section is another
view of the same container, so writes through it reach the actual argument, as Fortran's
pass-by-reference does.
"""
from __future__ import annotations

from ...errors import unsupported
from ...ir.core import Index, Ref, Slice, op
from .source import _fparser


# ---------------------------------------------------------------- where variables live


class ArrayView:
    """A Fortran array (or section) in a container. ``axes``: per container axis ``("fix",
    position)`` or ``("dim", d, start, step)``; ``lbounds``/``extents``: per Fortran dimension."""

    __slots__ = ("container", "axes", "lbounds", "extents")

    def __init__(self, container, axes, lbounds, extents):
        self.container, self.axes = container, list(axes)
        self.lbounds, self.extents = list(lbounds), list(extents)

    @classmethod
    def whole(cls, container, lbounds=None):
        r = container.ndim
        lbounds = list(lbounds) if lbounds is not None else [1] * r
        axes = [("dim", r - 1 - k, 0, 1) for k in range(r)]
        return cls(container, axes, [_e(lb) for lb in lbounds], [container.shape[r - 1 - d] for d in range(r)])

    @property
    def rank(self):
        return len(self.extents)

    def _dim_axis(self, d):
        for ax in self.axes:
            if ax[0] == "dim" and ax[1] == d:
                return ax
        raise KeyError(d)

    def position(self, d, s):
        """The container position of Fortran subscript ``s`` along dimension ``d``."""
        _, _, start, step = self._dim_axis(d)
        return _e(start) + _e(step) * (_e(s) - self.lbounds[d])

    def ref(self) -> Ref:
        """The whole view as an IR reference, its axes in reverse Fortran order."""
        items, order = [], []
        for ax in self.axes:
            if ax[0] == "fix":
                items.append(Index(ax[1]))
            else:
                items.append(Slice(ax[2], self.extents[ax[1]], ax[3]))
                order.append(ax[1])
        r = len(order)
        perm = [order.index(r - 1 - p) for p in range(r)]
        return Ref(self.container, items, perm)

    def element(self, subs) -> Ref:
        items = []
        for ax in self.axes:
            items.append(Index(ax[1] if ax[0] == "fix" else self.position(ax[1], subs[ax[1]])))
        return Ref(self.container, items)

    def section(self, subs):
        """``subs``: per dimension ``("i", s)`` or ``("r", lo, hi, stride)`` (Fortran values; a
        ``None`` bound is the dimension's bound). A view whose dimensions are the ranges."""
        new_dim, lbounds, extents, axes = {}, [], [], []
        for d, sub in enumerate(subs):
            if sub[0] == "r":
                new_dim[d] = len(extents)
                lo = self.lbounds[d] if sub[1] is None else _e(sub[1])
                hi = self.lbounds[d] + self.extents[d] - 1 if sub[2] is None else _e(sub[2])
                st = _e(1 if sub[3] is None else sub[3])
                lbounds.append(_e(1))
                extents.append(extent(lo, hi, st))
        for ax in self.axes:
            if ax[0] == "fix":
                axes.append(ax)
                continue
            d = ax[1]
            sub = subs[d]
            if sub[0] == "i":
                axes.append(("fix", self.position(d, sub[1])))
            else:
                lo = self.lbounds[d] if sub[1] is None else _e(sub[1])
                st = _e(1 if sub[3] is None else sub[3])
                axes.append(("dim", new_dim[d], self.position(d, lo), _e(ax[3]) * st))
        return ArrayView(self.container, axes, lbounds, extents)

    def rebased(self, lbounds=None, extents=None):
        """The same elements with other lower bounds (a dummy's declaration) or leading extents."""
        return ArrayView(self.container, self.axes, lbounds or self.lbounds, extents or self.extents)


def _e(x):
    from ...ir.core import as_expr
    return as_expr(x)


def extent(lo, hi, stride=1):
    """Elements in ``lo:hi:stride``: ``max(0, (hi - lo + stride) / stride)`` (trunc division)."""
    from .exprs import int_div
    lo, hi, stride = _e(lo), _e(hi), _e(stride)
    from ...ir.core import const_value
    if const_value(stride) == 1:
        return op("maximum", hi - lo + 1, 0)
    return op("maximum", int_div(hi - lo + stride, stride), 0)


class Var:
    """A variable: its type and its storage, an ``ArrayView``, a scalar ``Ref``, or (a derived
    type) a dict of component ``Var``s. ``view`` is None for an array not yet allocated."""

    __slots__ = ("name", "tspec", "view", "ref", "fields", "readonly", "decl", "source", "inits")

    def __init__(self, name, tspec, view=None, ref=None, fields=None, readonly=False, decl=None):
        self.name, self.tspec = name, tspec
        self.view, self.ref, self.fields = view, ref, fields
        self.readonly, self.decl = readonly, decl
        self.source = None          # a module input's path, for messages
        self.inits = {}             # a record's component -> (scope, node) of its initial value

    @property
    def is_array(self):
        return self.view is not None or (self.decl is not None and self.decl.dims is not None
                                         and self.fields is None)

    @property
    def is_record(self):
        return self.fields is not None


def is_constructor(node, tspec):
    """Whether expression ``node`` is a structure constructor of derived type ``tspec`` (fparser
    reads ``T(a, b)`` in a statement as a function reference or an array element)."""
    F = _fparser()[2]
    return isinstance(node, (F.Structure_Constructor, F.Part_Ref, F.Function_Reference)) and \
        str(node.children[0]).lower() == tspec.derived


def field_init(var, comp, cdecl, owner):
    """(scope, node) of the initial value of component ``comp`` of record ``var``: the structure
    constructor's value where one initialises the record, else the component's default."""
    return var.inits.get(comp, (owner, cdecl.init))


class Value:
    """A read-only scalar value (a ``PARAMETER``, a constant or a value argument)."""

    __slots__ = ("expr", "tspec")

    def __init__(self, expr, tspec=None):
        self.expr, self.tspec = expr, tspec


def is_dummy_procedure(decls, name):
    """Whether dummy ``name`` is a procedure (EXTERNAL, PROCEDURE(...), or given an interface)."""
    d = decls.decls.get(name)
    return (d is not None and d.external) or name in decls.interfaces


class ProcArg:
    """A dummy procedure bound to the procedure its call passes (``CALL SOLVE(RHS, Y)``)."""

    __slots__ = ("name", "proc")

    def __init__(self, name, proc):
        self.name, self.proc = name, proc


class Absent:
    """An ``OPTIONAL`` dummy that the call does not pass."""

    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name


# ---------------------------------------------------------------- declarations


class Decl:
    """One declared name. ``dims``: None for a scalar, else per dimension ``(kind, lo, hi)``
    with kind ``explicit`` (lo None means 1), ``assumed`` (``:`` or ``lo:``), ``deferred``
    (allocatable or pointer ``:``) or ``size`` (the last ``*`` of an assumed-size array)."""

    __slots__ = ("name", "type_node", "tspec", "dims", "intent", "optional", "parameter", "save", "allocatable",
                 "pointer", "external", "init", "node", "value")

    def __init__(self, name):
        self.name = name
        self.type_node = self.tspec = self.dims = self.intent = self.init = self.node = None
        self.optional = self.parameter = self.save = self.allocatable = self.pointer = self.external = False
        self.value = False


class TypeDef:
    """A derived type: its components (``Decl``s, in order)."""

    def __init__(self, name, components, loc):
        self.name, self.components, self.loc = name, components, loc


class Declarations:
    """What a specification part declares."""

    def __init__(self):
        self.decls = {}             # name -> Decl
        self.implicit = []          # [(TypeSpec node or None for NONE, [(first, last) letters])]
        self.uses = []              # [(module name, only: None or [(local, remote)], renames [(local, remote)])]
        self.typedefs = {}          # name -> (Derived_Type_Def node)
        self.generics = {}          # generic name -> [specific procedure names]
        self.interfaces = set()     # names of external procedures with an explicit interface
        self.stmt_funcs = {}        # name -> (dummy names, expression node, statement node)
        self.save_all = False
        self.data = []              # DATA statement sets, in order

    def decl(self, name):
        name = name.lower()
        d = self.decls.get(name)
        if d is None:
            d = self.decls[name] = Decl(name)
        return d


def _array_spec(node, loc_of):
    """Per-dimension ``(kind, lo, hi)`` of an array specification node."""
    F = _fparser()[2]
    if node is None:
        return None
    if isinstance(node, F.Assumed_Size_Spec):
        shape, lo = node.children
        dims = [] if shape is None else _array_spec(shape, loc_of)
        return dims + [("size", lo, None)]
    items = node.children if hasattr(node, "children") and isinstance(node, F.SequenceBase) else [node]
    dims = []
    for spec in items:
        if isinstance(spec, F.Explicit_Shape_Spec):
            lo, hi = spec.children
            dims.append(("explicit", lo, hi))
        elif isinstance(spec, F.Assumed_Shape_Spec):
            dims.append(("assumed", spec.children[0], None))
        elif isinstance(spec, F.Deferred_Shape_Spec):
            dims.append(("deferred", None, None))
        elif isinstance(spec, F.Assumed_Size_Spec):
            dims.extend(_array_spec(spec, loc_of))
        else:
            raise unsupported(loc_of(node), f"array specification {spec}", "declare explicit bounds")
    return dims


def _walk_spec(parts):
    """Every statement of specification parts, descending into ``Implicit_Part``."""
    F = _fparser()[2]
    for part in parts:
        for s in part.children:
            if isinstance(s, F.Implicit_Part):
                yield from s.children
            else:
                yield s


def declarations(unit):
    """The ``Declarations`` of a module or procedure (computed once per parse)."""
    cached = getattr(unit, "_declarations", None)
    if cached is not None:
        return cached
    F = _fparser()[2]
    out = Declarations()
    loc_of = unit.loc
    for s in _walk_spec(unit.spec):
        if isinstance(s, F.Type_Declaration_Stmt):
            tnode, attrs, entities = s.children
            common = Decl("")
            dims = None
            for a in (attrs.children if attrs is not None else ()):
                dims = _attr(common, a, loc_of) or dims
            for ent in entities.children:
                name, spec, _length, init = ent.children
                d = out.decl(str(name))
                d.type_node, d.node = tnode, s
                for field in ("intent", "optional", "parameter", "save", "allocatable", "pointer", "external",
                              "value"):
                    if getattr(common, field):
                        setattr(d, field, getattr(common, field))
                d.dims = _array_spec(spec, loc_of) if spec is not None else (dims if dims is not None else d.dims)
                if init is not None:
                    d.init = init.children[1]
                    if str(init.children[0]).strip() == "=>":
                        d.init = None           # => NULL(): a pointer starting unassociated
        elif isinstance(s, F.Dimension_Stmt):
            for name, spec in s.children[0]:
                out.decl(str(name)).dims = _array_spec(spec, loc_of)
        elif isinstance(s, F.Parameter_Stmt):
            for named in s.children[1].children:
                name, expr = named.children
                d = out.decl(str(name))
                d.parameter, d.init, d.node = True, expr, s
        elif isinstance(s, F.Intent_Stmt):
            spec, names = s.children
            for n in names.children:
                out.decl(str(n)).intent = str(spec).lower().replace(" ", "")
        elif isinstance(s, (F.Optional_Stmt, F.Save_Stmt, F.Allocatable_Stmt, F.Pointer_Stmt, F.External_Stmt,
                            F.Target_Stmt, F.Intrinsic_Stmt, F.Access_Stmt, F.Value_Stmt)):
            _attribute_stmt(out, s, loc_of)
        elif isinstance(s, F.Implicit_Stmt):
            specs = s.children[0]
            if specs is None or str(specs).upper() == "NONE":
                out.implicit.append((None, []))
            else:
                for spec in specs.children:
                    tnode, letters = spec.children
                    ranges = []
                    for ls in letters.children:
                        a, b = ls.children
                        ranges.append((str(a).lower(), str(b if b is not None else a).lower()))
                    out.implicit.append((tnode, ranges))
        elif isinstance(s, F.Use_Stmt):
            out.uses.append(_use(s))
        elif isinstance(s, F.Derived_Type_Def):
            name = str(s.children[0].children[1]).lower()
            out.typedefs[name] = s
        elif isinstance(s, F.Interface_Block):
            _interface(out, s)
        elif isinstance(s, F.Stmt_Function_Stmt):
            name, args, expr = s.children
            out.stmt_funcs[str(name).lower()] = ([str(a).lower() for a in (args.children if args else ())], expr, s)
        elif isinstance(s, F.Data_Stmt):
            out.data.append(s)
        elif isinstance(s, F.Common_Stmt):
            raise unsupported(loc_of(s), "COMMON block", "move the variables into a module (or pass them "
                              "as arguments)")
        elif isinstance(s, F.Equivalence_Stmt):
            raise unsupported(loc_of(s), "EQUIVALENCE", "use separate variables (or a pointer-free copy)")
        elif isinstance(s, F.Entry_Stmt):
            raise unsupported(loc_of(s), "ENTRY statement", "split the routine into separate subroutines")
        elif isinstance(s, (F.Format_Stmt, F.Namelist_Stmt, F.Import_Stmt)) or type(s).__name__ in (
                "Comment", "Include_Stmt", "Directive"):
            continue
        elif isinstance(s, F.Procedure_Declaration_Stmt):
            _procedure_decl(out, s, loc_of)
        else:
            raise unsupported(loc_of(s), f"declaration {type(s).__name__} ({str(s)[:40]})",
                              "this specification statement is not supported")
    unit._declarations = out
    return out


def _attr(d, a, loc_of):
    """Apply an attribute spec to ``d``; returns the dimension spec of a DIMENSION attribute."""
    F = _fparser()[2]
    if isinstance(a, F.Intent_Attr_Spec):
        d.intent = str(a.children[1]).lower().replace(" ", "")        # IN OUT is INOUT
    elif isinstance(a, F.Dimension_Attr_Spec):
        return _array_spec(a.children[1], loc_of)
    else:
        word = str(a).upper().split("(")[0].strip()
        if word == "PARAMETER":
            d.parameter = True
        elif word == "OPTIONAL":
            d.optional = True
        elif word == "SAVE":
            d.save = True
        elif word == "ALLOCATABLE":
            d.allocatable = True
        elif word == "POINTER":
            d.pointer = True
        elif word == "EXTERNAL":
            d.external = True
        elif word == "VALUE":
            d.value = True
    return None


def _attribute_stmt(out, s, loc_of):
    F = _fparser()[2]
    field = {F.Optional_Stmt: "optional", F.Save_Stmt: "save", F.Allocatable_Stmt: "allocatable",
             F.Pointer_Stmt: "pointer", F.External_Stmt: "external", F.Value_Stmt: "value"}.get(type(s))
    if isinstance(s, F.Save_Stmt) and (len(s.children) < 2 or s.children[1] is None):
        out.save_all = True
        return
    if field is None:
        return
    for child in s.children:
        if child is None or isinstance(child, str):
            continue
        names = child.children if isinstance(child, F.SequenceBase) else [child]
        for n in names:
            if isinstance(n, F.Name):
                setattr(out.decl(str(n)), field, True)
            elif hasattr(n, "children") and n.children and isinstance(n.children[0], F.Name):
                d = out.decl(str(n.children[0]))
                setattr(d, field, True)
                if len(n.children) > 1 and n.children[1] is not None and field in ("allocatable", "pointer"):
                    d.dims = _array_spec(n.children[1], loc_of)


def _use(s):
    F = _fparser()[2]
    items = s.children
    module = next(str(c).lower() for c in items if isinstance(c, F.Name))
    tail = items[-1]
    only, renames = None, []
    has_only = any(isinstance(c, str) and "ONLY" in c.upper() for c in items)
    pairs = []
    if tail is not None and not isinstance(tail, str) and not isinstance(tail, F.Name):
        for item in getattr(tail, "children", ()):
            if isinstance(item, F.Rename):
                local, remote = (str(x).lower() for x in item.children[-2:])
                pairs.append((local, remote))
            elif isinstance(item, F.Name):
                pairs.append((str(item).lower(), str(item).lower()))
            else:
                text = str(item).lower()
                pairs.append((text, text))
    if has_only:
        only = pairs
    else:
        renames = pairs
    return module, only, renames


def _procedure_decl(out, s, loc_of):
    """``PROCEDURE(iface) [, OPTIONAL] :: f``: ``f`` a dummy procedure (a procedure pointer is refused)."""
    _iface, attrs, names = s.children
    if attrs is not None and any(str(a).upper().startswith("POINTER") for a in attrs.children):
        raise unsupported(loc_of(s), "procedure pointer", "call the procedure directly")
    for name in names.children:
        d = out.decl(str(name))
        d.external, d.node = True, s
        d.optional = d.optional or (attrs is not None and any(str(a).upper() == "OPTIONAL" for a in attrs.children))


def _interface(out, s):
    F = _fparser()[2]
    head = s.children[0]
    generic = None
    spec = head.children[0] if head.children else None
    if spec is not None and not isinstance(spec, str):
        generic = str(spec).lower()
    specifics = []
    for c in s.children[1:]:
        if isinstance(c, F.Procedure_Stmt):
            specifics += [str(n).lower() for n in c.children[0].children]
        elif isinstance(c, (F.Subroutine_Body, F.Function_Body)):
            name = str(c.children[0].children[1]).lower()
            specifics.append(name)
            out.interfaces.add(name)
    if generic is not None:
        out.generics[generic] = specifics


def implicit_rules(unit, parent_rules):
    """Letter -> TypeSpec node (or a TypeSpec) of a unit, from its host's rules and its own
    IMPLICIT statements; an empty dict under IMPLICIT NONE."""
    rules = dict(parent_rules)
    for tnode, ranges in declarations(unit).implicit:
        if tnode is None:
            rules = {}
            continue
        for a, b in ranges:
            for c in range(ord(a), ord(b) + 1):
                rules[chr(c)] = tnode
    return rules


__all__ = ["ArrayView", "Var", "Value", "Absent", "Decl", "declarations", "implicit_rules", "extent"]
