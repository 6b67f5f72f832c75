"""Fortran sources: reading, the C preprocessor, parsing with fparser2, and the program units.

A ``Library`` holds every module and external procedure of the sources given to
``from_fortran``; each procedure knows its host (a module or a containing procedure), so that
names resolve as Fortran resolves them. Line numbers in parse trees refer to the preprocessed
text; ``SourceText.loc`` maps them back to the file and line the user wrote (``#include``d
files included), from the preprocessor's line markers.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

from ...errors import FlowgradError, InputError, Loc, UnsupportedError

FIXED_SUFFIXES = (".f", ".for", ".ftn", ".f77", ".fpp")
PREPROCESSED_SUFFIXES = (".F", ".F90", ".F95", ".F03", ".F08", ".FPP", ".FOR", ".FTN", ".fpp")


def _fparser():
    try:
        from fparser.common.readfortran import FortranStringReader
        from fparser.common.sourceinfo import FortranFormat
        from fparser.two import Fortran2003
        from fparser.two.parser import ParserFactory
        from fparser.two.symbol_table import SYMBOL_TABLES
        from fparser.two.utils import FortranSyntaxError
    except ImportError:
        raise FlowgradError("from_fortran needs the fparser package: pip install 'flowgrad[fortran]' "
                            "(or pip install fparser)") from None
    return FortranStringReader, FortranFormat, Fortran2003, ParserFactory, SYMBOL_TABLES, FortranSyntaxError


class SourceText:
    """One source as parsed: its text (preprocessed where asked) and where each line came from."""

    def __init__(self, name, text, free, origins=None):
        self.name, self.text, self.free = name, text, free
        self.origins = origins          # preprocessed line (1-based) -> (file, line), or None

    def loc(self, line):
        if line is None:
            return Loc(self.name, 0)
        if self.origins and 0 < line <= len(self.origins):
            return Loc(*self.origins[line - 1])
        return Loc(self.name, line)


def _is_free(name, text):
    """Free or fixed form: by the file suffix as gfortran decides, else from the text (fparser's
    guess, and free form where a statement line runs past column 72)."""
    base = os.path.basename(name)
    if not base.startswith("<") and "." in base:
        return not base.lower().endswith(FIXED_SUFFIXES)
    from fparser.common.sourceinfo import get_source_info_str
    if get_source_info_str(text).is_free:
        return True
    return any(len(line.rstrip()) > 72 and line[:1] not in "cC*!" for line in text.splitlines())


def _preprocess(name, text, free, include_dirs, defines):
    """The C preprocessor as ``gfortran -cpp`` runs it (traditional mode, Fortran's rules),
    keeping line markers to map lines back; ``cpp -traditional-cpp`` where gfortran is missing."""
    gfortran = shutil.which("gfortran")
    cpp = shutil.which("cpp")
    if gfortran is None and cpp is None:
        raise FlowgradError(f"{name}: preprocessing Fortran needs gfortran or cpp on the PATH "
                            "(apt-get install gfortran)")
    with tempfile.TemporaryDirectory(prefix="flowgrad-fpp-") as tmp:
        path = os.path.join(tmp, "source.F90" if free else "source.F")
        with open(path, "w") as f:
            f.write(text)
        flags = []
        here = os.path.dirname(os.path.abspath(name)) if os.path.exists(name) else None
        for d in ([here] if here else []) + list(include_dirs):
            flags.append("-I" + str(d))
        for key, value in (defines or {}).items():
            flags.append(f"-D{key}" if value is None else f"-D{key}={value}")
        if gfortran is not None:
            cmd = [gfortran, "-cpp", "-E", "-ffree-form" if free else "-ffixed-form", *flags, path]
        else:
            cmd = [cpp, "-traditional-cpp", "-w", *flags, path]
        run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        message = run.stderr.replace(path, name).strip()
        raise FlowgradError(f"{name}: the C preprocessor failed:\n{message}")
    lines, origins = [], []
    current, lineno = name, 1
    for line in run.stdout.splitlines():
        if line.startswith("# ") or line.startswith("#line "):
            parts = line.split()
            if len(parts) >= 3 and parts[1].isdigit() and parts[2].startswith('"'):
                lineno = int(parts[1])
                where = parts[2].strip('"')
                current = name if where == path else where
                continue
        lines.append(line)
        origins.append((current, lineno))
        lineno += 1
    return "\n".join(lines) + "\n", origins


def read_sources(sources, include_dirs=(), defines=None):
    """``SourceText`` for each source: a path, a list of paths, or Fortran source text."""
    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    out = []
    for k, src in enumerate(sources):
        src = os.fspath(src) if isinstance(src, os.PathLike) else src
        if not isinstance(src, str):
            raise InputError(f"from_fortran takes paths or source text, not {type(src).__name__}")
        is_text = "\n" in src or not os.path.exists(src)
        if is_text and "\n" not in src and src.strip().lower().endswith((".f", ".f90", ".f95", ".f03", ".f08",
                                                                       ".for", ".fpp", ".h", ".inc")):
            raise InputError(f"Fortran source file {src!r} does not exist")
        if is_text:
            name, text = f"<fortran source {k + 1}>" if len(sources) > 1 else "<fortran source>", src
            free = _is_free(name, text)
            preprocess = bool(include_dirs) or defines is not None
        else:
            name = src
            with open(src, errors="replace") as f:
                text = f.read()
            free = _is_free(name, text)
            preprocess = os.path.basename(src).endswith(PREPROCESSED_SUFFIXES) or bool(include_dirs) or \
                defines is not None
        origins = None
        if preprocess:
            text, origins = _preprocess(name, text, free, include_dirs, defines)
        if not free:
            text = "".join(_fixed_statement_field(line) for line in text.splitlines(keepends=True))
        out.append(SourceText(name, text, free, origins))
    return out


def _fixed_statement_field(line):
    """A fixed-form line without what lies past column 72 (card sequence numbers, ``LEG00010``),
    as gfortran reads it; a tab in the label field moves the statement to column 7."""
    body = line.rstrip("\r\n")
    tab = body.find("\t", 0, 6)
    end = 72 if tab < 0 else tab + 1 + 66
    return body[:end] + line[len(body):] if len(body) > end else line


def parse(source: SourceText, include_dirs=()):
    """The fparser2 parse tree of one source (Fortran 2008)."""
    FortranStringReader, FortranFormat, F, ParserFactory, SYMBOL_TABLES, FortranSyntaxError = _fparser()
    SYMBOL_TABLES.clear()
    reader = FortranStringReader(source.text, ignore_comments=True, include_dirs=list(include_dirs))
    reader.set_format(FortranFormat(source.free, False))
    parser = ParserFactory().create(std="f2008")
    try:
        tree = parser(reader)
    except FortranSyntaxError as exc:
        text = str(exc)
        line = None
        for word in text.replace(":", " ").split():
            if word.isdigit():
                line = int(word)
                break
        raise UnsupportedError(f"{source.loc(line)}: Fortran syntax fparser cannot parse: "
                               f"{text.splitlines()[-1] if text else ''}".rstrip()) from None
    except Exception as exc:        # fparser reports some errors as other exceptions
        raise UnsupportedError(f"{source.name}: fparser could not parse the source: {exc}") from None
    finally:
        SYMBOL_TABLES.clear()
    if tree is None:
        raise UnsupportedError(f"{source.name}: fparser found no program units in the source")
    return tree


# ---------------------------------------------------------------- program units


def node_item(node):
    """The reader's item (line span, reader) of the first statement in a parse-tree node."""
    item = getattr(node, "item", None)
    if item is not None and getattr(item, "span", None):
        return item
    for child in getattr(node, "children", ()) or ():
        if child is not None and not isinstance(child, str):
            found = node_item(child)
            if found is not None:
                return found
    return None


def node_line(node):
    """The first (preprocessed) line of a parse-tree node, from the nearest statement inside it."""
    item = node_item(node)
    return item.span[0] if item is not None else None


def node_loc(source, node):
    """Where a node's statement is in the user's files: through the preprocessor's line markers,
    or in a file a Fortran INCLUDE line read."""
    item = node_item(node) if node is not None else None
    if item is None:
        return source.loc(None)
    reader_id = str(getattr(getattr(item, "reader", None), "id", "") or "")
    if reader_id and not reader_id.startswith("string-"):
        return Loc(reader_id, item.span[0])
    return source.loc(item.span[0])


class Unit:
    """What a module and a procedure share: a name, specification parts (``spec``), a source."""

    def __init__(self, name, node, spec, source):
        self.name, self.node, self.spec, self.source = name, node, spec, source

    def loc(self, node=None):
        return node_loc(self.source, node if node is not None else self.node)


class ProcDef(Unit):
    """A subroutine or function: dummies, result, body, internal procedures and host."""

    def __init__(self, node, source, host=None, module=None):
        F = _fparser()[2]
        stmt = node.children[0]
        self.kind = "function" if isinstance(node, F.Function_Subprogram) else "subroutine"
        name = str(stmt.children[1]).lower()
        super().__init__(name, node, _children(node, F.Specification_Part), source)
        self.stmt = stmt
        args = stmt.children[2]
        self.dummies = [str(a).lower() for a in (args.children if args is not None else ())]
        self.prefix = stmt.children[0]
        self.result = name
        self.elemental = self.prefix is not None and "ELEMENTAL" in str(self.prefix).upper()
        if self.kind == "function" and len(stmt.children) > 3 and stmt.children[3] is not None:
            suffix = stmt.children[3]
            for part in getattr(suffix, "children", ()):
                if isinstance(part, F.Name):
                    self.result = str(part).lower()
                    break
        # a statement function makes fparser end the specification part early: the parts after it
        # are read in order, as one specification and one body
        self.body = [s for part in _children(node, F.Execution_Part) for s in part.children]
        self.host, self.module = host, module
        self.internals = {}
        part = _child(node, F.Internal_Subprogram_Part)
        for sub in (part.children if part is not None else ()):
            if isinstance(sub, (F.Subroutine_Subprogram, F.Function_Subprogram)):
                p = ProcDef(sub, source, host=self, module=module)
                self.internals[p.name] = p

    def __repr__(self):
        return f"<{self.kind} {self.name}>"


class ModuleDef(Unit):
    def __init__(self, node, source):
        F = _fparser()[2]
        name = str(node.children[0].children[1]).lower()
        super().__init__(name, node, _children(node, F.Specification_Part), source)
        self.procs = {}
        part = _child(node, F.Module_Subprogram_Part)
        for sub in (part.children if part is not None else ()):
            if isinstance(sub, (F.Subroutine_Subprogram, F.Function_Subprogram)):
                p = ProcDef(sub, source, module=self)
                self.procs[p.name] = p


def _children(node, cls):
    return [c for c in getattr(node, "children", ()) or () if isinstance(c, cls)]


def _child(node, cls):
    for c in getattr(node, "children", ()) or ():
        if isinstance(c, cls):
            return c
    return None


class Library:
    """Every module and external procedure of a set of sources."""

    def __init__(self, sources, include_dirs=()):
        F = _fparser()[2]
        self.sources = sources
        self.modules, self.procs = {}, {}
        for src in sources:
            tree = parse(src, include_dirs)
            for unit in tree.children:
                if isinstance(unit, F.Module):
                    m = ModuleDef(unit, src)
                    if m.name in self.modules:
                        raise InputError(f"{m.loc()}: module {m.name} is defined twice in the sources")
                    self.modules[m.name] = m
                elif isinstance(unit, (F.Subroutine_Subprogram, F.Function_Subprogram)):
                    p = ProcDef(unit, src)
                    self.procs.setdefault(p.name, p)

    def find(self, entry):
        """The procedure named ``entry`` (case-insensitive): external, or inside a module."""
        name = entry.lower()
        if name in self.procs:
            return self.procs[name]
        found = [m.procs[name] for m in self.modules.values() if name in m.procs]
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            raise InputError(f"procedure {entry!r} is defined in several modules: "
                             f"{', '.join(p.module.name for p in found)}")
        names = sorted(set(self.procs) | {n for m in self.modules.values() for n in m.procs})
        raise InputError(f"no subroutine or function named {entry!r} in the sources; they define: "
                         f"{', '.join(names) or 'none'}")
