"""Readable text form of the IR (``str(program)``)."""
from __future__ import annotations

from .core import (Assign, Call, Const, For, If, Index, NewAxis, Op, Pop, Push, Read, Take, While,
                   const_value)
from .elements import INFIX as _INFIX



def expr_text(e) -> str:
    if isinstance(e, Const):
        return repr(e.value)
    if isinstance(e, Read):
        return ref_text(e.ref)
    if isinstance(e, Op):
        if e.name in _INFIX:
            return f"({expr_text(e.args[0])} {_INFIX[e.name]} {expr_text(e.args[1])})"
        if e.name == "negative":
            return f"-{expr_text(e.args[0])}"
        return f"{e.name}({', '.join(expr_text(a) for a in e.args)})"
    if isinstance(e, Take):
        return f"take({ref_text(e.source)}, {', '.join(expr_text(i) for i in e.index)})"
    return repr(e)


def ref_text(r) -> str:
    c = r.container
    if r.is_whole():
        return c.name
    parts = []
    for it in r.items:
        if isinstance(it, Index):
            parts.append(expr_text(it.at))
        elif isinstance(it, NewAxis):
            parts.append("newaxis")
        else:
            start, size, step = (expr_text(it.start), expr_text(it.size), expr_text(it.step))
            s = f"{start}:+{size}"
            if const_value(it.step) != 1:
                s += f":{step}"
            parts.append(s)
    text = f"{c.name}[{', '.join(parts)}]" if parts else c.name
    if r.perm is not None:
        text += f".transpose{r.perm}"
    return text


def _shape_text(c):
    return ", ".join(expr_text(d) for d in c.shape)


def stmt_lines(s, indent=""):
    if isinstance(s, Assign):
        yield f"{indent}{ref_text(s.dst)} {'+=' if s.accumulate else '='} {expr_text(s.expr)}"
    elif isinstance(s, Call):
        attrs = "".join(f", {k}={_attr_text(v)}" for k, v in sorted(s.attrs.items()))
        outs = ", ".join(c.name for c in s.outputs)
        yield f"{indent}{outs} = {s.op}({', '.join(expr_text(i) for i in s.inputs)}{attrs})"
    elif isinstance(s, For):
        rng = f"{expr_text(s.start)}:{expr_text(s.stop)}:{expr_text(s.step)}"
        yield f"{indent}for {s.var.name} in {'reversed(' + rng + ')' if s.reverse else rng}:"
        yield from block_lines(s.body, indent + "  ")
    elif isinstance(s, While):
        yield f"{indent}while {expr_text(s.cond)}:"
        yield from block_lines(s.body, indent + "  ")
    elif isinstance(s, If):
        yield f"{indent}if {expr_text(s.cond)}:"
        yield from block_lines(s.then, indent + "  ")
        if s.orelse:
            yield f"{indent}else:"
            yield from block_lines(s.orelse, indent + "  ")
    elif isinstance(s, Push):
        yield f"{indent}push {s.tape.name} <- {ref_text(s.ref)}"
    elif isinstance(s, Pop):
        yield f"{indent}pop {s.tape.name} -> {ref_text(s.ref)}" + (" (read in its pass only)" if s.local is not None else "")
    else:
        yield f"{indent}{s!r}"


def _attr_text(v):
    if isinstance(v, tuple):
        return "(" + ", ".join(_attr_text(x) for x in v) + ")"
    if hasattr(v, "shape") and hasattr(v, "dtype") and not isinstance(v, type):
        try:
            return expr_text(v)
        except Exception:  # noqa: BLE001 - attrs may be plain values
            pass
    return repr(v)


def block_lines(stmts, indent):
    if not stmts:
        yield f"{indent}pass"
    for s in stmts:
        yield from stmt_lines(s, indent)


def program_text(p) -> str:
    params = ", ".join(f"{c.name}: {c.dtype}[{_shape_text(c)}]" for c in p.params + p.inputs)
    results = ", ".join(c.name for c in p.results + p.outputs)
    lines = [f"program {p.name}({params}) -> {results}"]
    lines += list(block_lines(p.body, "  "))
    return "\n".join(lines) + "\n"
