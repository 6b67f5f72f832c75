"""What a procedure does to names, read from its parse tree before any lowering: the dummies
it may write (through calls too), the module variables it reads, the integer dummies that size
its array dummies."""
from __future__ import annotations

from .scope import declarations
from .source import _fparser


def _walk(node):
    from fparser.two.utils import walk
    return walk(node)


def base_name(node):
    """The variable a designator names (``a`` of ``a(i)%b(2)``), else None."""
    F = _fparser()[2]
    while True:
        if isinstance(node, F.Name):
            return str(node).lower()
        if isinstance(node, (F.Part_Ref, F.Data_Ref, F.Intrinsic_Function_Reference)):
            node = node.children[0]
            continue
        return None


def resolve(library, proc, name, seen=None):
    """The procedure ``name`` refers to inside ``proc`` (internal, module, USEd, external), else
    None; a generic resolves to its list of specifics."""
    p = proc
    while p is not None:
        if name in p.internals:
            return p.internals[name]
        found = _in_unit(library, p, name, set())
        if found is not None:
            return found
        p = p.host
    if proc.module is not None:
        found = _in_unit(library, proc.module, name, set())
        if found is not None:
            return found
    return library.procs.get(name)


def used_name(name, only, renames):
    """The name in a module that ``name`` stands for through ``USE module[, ONLY: ...][, renames]``,
    or None when that USE does not bring it."""
    if only is not None:
        return next((r for l, r in only if l == name), None)
    return next((r for l, r in renames if l == name), name)


def _in_unit(library, unit, name, seen):
    if hasattr(unit, "procs") and name in unit.procs:
        return unit.procs[name]
    decls = declarations(unit)
    if name in decls.generics:
        out = []
        for n in decls.generics[name]:
            r = _in_unit(library, unit, n, seen) or library.procs.get(n)
            if r is not None and not isinstance(r, list):
                out.append(r)
        return out or None
    for module, only, renames in decls.uses:
        if module in seen or module not in library.modules:
            continue
        remote = used_name(name, only, renames)
        if remote is None:
            continue
        found = _in_unit(library, library.modules[module], remote, seen | {module})
        if found is not None:
            return found
    return None


def _body(proc):
    for s in proc.body:
        yield from _walk(s)


def written_names(library, proc, _stack=()):
    """Names ``proc`` may write: assignment targets, DO variables, allocations, and actual
    arguments whose dummy the callee may write (INTENT(OUT/INOUT), or assigned without INTENT)."""
    cached = getattr(proc, "_flowgrad_written", None)
    if cached is not None:
        return cached
    if proc in _stack:
        return set()
    F = _fparser()[2]
    out = set()
    for node in _body(proc):
        if isinstance(node, F.Assignment_Stmt):
            n = base_name(node.children[0])
            if n:
                out.add(n)
        elif isinstance(node, F.Loop_Control) and node.children[1] is not None:
            out.add(str(node.children[1][0]).lower())
        elif isinstance(node, F.Allocate_Stmt):
            for alloc in _walk(node):
                if isinstance(alloc, F.Allocation):
                    n = base_name(alloc.children[0])
                    if n:
                        out.add(n)
        elif isinstance(node, (F.Call_Stmt, F.Part_Ref, F.Function_Reference)):
            head = node.children[0]
            callee_name = base_name(head) if isinstance(node, F.Call_Stmt) else str(head).lower()
            callee = resolve(library, proc, callee_name) if callee_name else None
            args = node.children[1]
            if args is None:
                continue
            if callee is None:
                if isinstance(node, F.Call_Stmt):       # unknown: it may write what it is passed
                    out |= {n for n in (base_name(a) for a in args.children) if n}
                continue
            callees = callee if isinstance(callee, list) else [callee]
            for c in callees:
                out |= _written_through(library, proc, c, args, _stack + (proc,))
    # an ASSOCIATE name written writes its selector
    for node in _body(proc):
        if isinstance(node, F.Association):
            if str(node.children[0]).lower() in out:
                n = base_name(node.children[-1])
                if n:
                    out.add(n)
    proc._flowgrad_written = out
    return out


def _written_through(library, proc, callee, args, stack):
    from .calls import split_args
    try:
        pos, kw = split_args(args.children)
    except Exception:
        return set()
    decls = declarations(callee).decls
    inner = written_names(library, callee, stack)
    out = set()
    bound = dict(zip(callee.dummies, pos))
    bound.update({k: v for k, v in kw.items() if k in callee.dummies})
    for d, node in bound.items():
        dd = decls.get(d)
        intent = dd.intent if dd is not None else None
        if intent == "in" or (intent is None and d not in inner) or (dd is not None and dd.value):
            continue
        n = base_name(node)
        if n:
            out.add(n)
    return out


def written_dummies(library, proc):
    """The dummies the caller sees written: INTENT(OUT)/INTENT(INOUT), or (without INTENT)
    assigned by the procedure or the procedures it calls."""
    decls = declarations(proc).decls
    written = written_names(library, proc)
    out = []
    for d in proc.dummies:
        dd = decls.get(d)
        intent = dd.intent if dd is not None else None
        if intent in ("out", "inout") or (intent is None and d in written and not (dd is not None and dd.value)):
            out.append(d)
    return out


def sizing_integers(proc):
    """Integer-looking dummies read by the explicit bounds of the procedure's array dummies (they
    are part of the arrays' shapes)."""
    F = _fparser()[2]
    decls = declarations(proc).decls
    names = set()
    for d in proc.dummies:
        dd = decls.get(d)
        if dd is None or dd.dims is None:
            continue
        for kind, lo, hi in dd.dims:
            for bound in (lo, hi):
                if bound is None:
                    continue
                nodes = [bound] + list(_walk(bound))
                for n in nodes:
                    if isinstance(n, F.Name) and str(n).lower() in proc.dummies:
                        names.add(str(n).lower())
    return names


def module_variables(library, proc, _seen=None):
    """``module.name`` of the module variables (not PARAMETERs) ``proc`` and the procedures it
    calls may read, in a stable order."""
    F = _fparser()[2]
    seen = _seen if _seen is not None else set()
    if proc in seen:
        return []
    seen.add(proc)
    out = []
    local = set(proc.dummies) | set(declarations(proc).decls) | {proc.result}
    spec = [n for part in proc.spec for n in _walk(part)]
    for node in spec + list(_body(proc)):
        if isinstance(node, F.Name):
            name = str(node).lower()
            if name in local:
                continue
            hit = _module_var(library, proc, name)
            if hit is not None and hit not in out:
                out.append(hit)
        elif isinstance(node, (F.Call_Stmt, F.Part_Ref, F.Function_Reference)):
            n = base_name(node.children[0]) if isinstance(node, F.Call_Stmt) else str(node.children[0]).lower()
            callee = resolve(library, proc, n) if n else None
            for c in (callee if isinstance(callee, list) else [callee] if callee is not None else []):
                for hit in module_variables(library, c, seen):
                    if hit not in out:
                        out.append(hit)
    return out


def _module_var(library, proc, name):
    """``module.name`` when ``name`` in ``proc`` is a module variable (not a PARAMETER)."""
    units = []
    p = proc
    while p is not None:
        units.append(p)
        p = p.host
    if proc.module is not None:
        units.append(proc.module)
    for unit in units:
        hit = _var_in(library, unit, name, set(), own=unit is proc.module)
        if hit is not None:
            return hit
        if unit is not proc.module and name in declarations(unit).decls:
            return None
    return None


def _var_in(library, unit, name, seen, own):
    decls = declarations(unit)
    if own and hasattr(unit, "procs"):
        d = decls.decls.get(name)
        if d is not None:
            return None if d.parameter or d.external else f"{unit.name}.{name}"
    for module, only, renames in decls.uses:
        if module in seen or module not in library.modules:
            continue
        remote = used_name(name, only, renames)
        if remote is None:
            continue
        hit = _var_in(library, library.modules[module], remote, seen | {module}, True)
        if hit is not None:
            return hit
    return None


def reused_arrays(proc):
    """The array dummies whose elements the procedure's loops visit more than once: referenced
    under more DO loops (an array section counting one loop per ranged subscript, a whole array
    or an actual argument one per dimension) than the array has dimensions."""
    F = _fparser()[2]
    decls = declarations(proc).decls
    ranks = {d: len(decls[d].dims) for d in proc.dummies if decls.get(d) is not None and decls[d].dims is not None}
    depth_of = {}

    def visit(node, depth):
        if isinstance(node, (F.Block_Nonlabel_Do_Construct, F.Block_Label_Do_Construct, F.Action_Term_Do_Construct)):
            depth += 1
        if isinstance(node, (F.Part_Ref, F.Intrinsic_Function_Reference)) and str(node.children[0]).lower() in ranks:
            name = str(node.children[0]).lower()
            subs = node.children[1].children if node.children[1] is not None else ()
            ranged = sum(isinstance(x, F.Subscript_Triplet) for x in subs)
            depth_of[name] = max(depth_of.get(name, 0), depth + ranged)
            for x in subs:
                visit(x, depth)
            return
        if isinstance(node, F.Name) and str(node).lower() in ranks:
            name = str(node).lower()
            depth_of[name] = max(depth_of.get(name, 0), depth + ranks[name])
            return
        for child in getattr(node, "children", ()) or ():
            if child is not None and not isinstance(child, str):
                if isinstance(child, (list, tuple)):
                    for c in child:
                        if c is not None and not isinstance(c, str):
                            visit(c, depth)
                else:
                    visit(child, depth)
    for s in proc.body:
        visit(s, 0)
    return {d for d, r in ranks.items() if depth_of.get(d, 0) > r}
