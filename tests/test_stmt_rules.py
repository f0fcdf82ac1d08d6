"""Every statement kind of the statement table (ir/tileops.py) has every rule: interpreter
rule, JIT emitter, printer and parser form, verifier rule, flop/byte rule, front-end
binding and a docs/language.md entry (for a kind only passes make, a docs/ir.md entry in
place of the last two). `missing` names each one a kind lacks."""

from __future__ import annotations

import importlib
import re
import typing
from pathlib import Path

import tilepy.language as T
from tilepy.interpreter import control
from tilepy.ir import analysis, parser, printer, tileops
from tilepy.ir import stmt as S
from tilepy.jit import lower

KINDS = typing.get_args(S.Stmt)
verify = importlib.import_module("tilepy.ir.verify")  # the package exports verify()
LANGUAGE_MD = Path(__file__).resolve().parents[1] / "docs" / "language.md"
IR_MD = LANGUAGE_MD.with_name("ir.md")
SURFACE_RULES = ("front-end binding (tilepy/language.py)", "docs/language.md entry")

# kinds the parser reads from Python syntax rather than from a `T.<name>(...)` call
SYNTAX = {S.Alloc: "st_Assign", S.Let: "st_Assign", S.Store: "st_Assign", S.For: "st_For",
          S.If: "st_If", S.While: "st_While", S.Launch: "st_With", S.Breakpoint: "st_Expr",
          S.Assert: "st_Assert",
          S.Versioned: "versioned"}


def _names(kind) -> list[str]:
    """The surface names of a kind, one per `kind` value (T.reduce_sum, ...)."""
    d = tileops.STMTS[kind]
    if "{kind}" not in d.surface:
        return [d.surface]
    return [d.surface.format(kind=k.value) for k in S.ReduceKind]


def _by_method(cls, prefix: str) -> dict:
    return {k: getattr(cls, prefix + k.__name__) for k in KINDS
            if hasattr(cls, prefix + k.__name__)}


def _parser_forms() -> dict:
    out = {}
    for k in KINDS:
        if k in SYNTAX:
            out[k] = getattr(parser._Parser, SYNTAX[k], None)
        elif k in tileops.STMTS:
            calls = [n[2:] for n in _names(k)]
            if all(hasattr(parser._Parser, "tile_" + c) or c in parser._FORMS
                   for c in calls):
                out[k] = calls
    return {k: v for k, v in out.items() if v is not None}


def _documented(text: str, kind) -> bool:
    d = tileops.STMTS[kind]
    if "{kind}" in d.surface:  # `T.reduce_{sum,max}` or each name
        prefix = d.surface.split("{kind}")[0]
        listed = set()
        for m in re.finditer(re.escape(prefix) + r"\{([\w,]+)\}", text):
            listed |= set(m.group(1).split(","))
        return all(k.value in listed or prefix + k.value in text for k in S.ReduceKind)
    return d.surface.split("*")[0] in text  # `T.alloc_*`: some T.alloc_ name


def registries() -> dict[str, dict]:
    """Per rule (named with where it lives): the kinds that have it."""
    text, ir_text = LANGUAGE_MD.read_text(), IR_MD.read_text()
    bound = {k for k in tileops.STMTS if not tileops.STMTS[k].internal
             and all(hasattr(T, n[2:]) for n in _names(k) if re.fullmatch(r"T\.\w+", n))}
    tile = {k: d.tile for k, d in tileops.STMTS.items() if d.tile}  # shape and work rules
    return {
        "interpreter rule (interpreter/control.py)": dict(control._EXEC),
        "JIT emitter (jit/lower.py)": {**lower._TILE, **lower._STMT},
        "printer form (ir/printer.py)": {**_by_method(printer._Printer, "s_"),
                                         **{k: d.form for k, d in tileops.STMTS.items()
                                            if d.form}},
        "parser form (ir/parser.py)": _parser_forms(),
        "verifier rule (ir/verify.py)": {**_by_method(verify._Verifier, "s_"), **tile},
        "flop/byte rule (ir/analysis.py)": {**_by_method(analysis._Counter, "s_"), **tile},
        "front-end binding (tilepy/language.py)": dict.fromkeys(bound),
        "docs/language.md entry": {k: True for k in tileops.STMTS if _documented(text, k)},
        "docs/ir.md entry": {k: True for k in tileops.STMTS
                             if not tileops.STMTS[k].internal or f"`{k.__name__}`" in ir_text},
    }


def missing(regs: dict[str, dict], table: dict) -> list[str]:
    out = []
    for k in KINDS:
        if k not in table:
            out.append(f"{k.__name__}: no entry in ir/tileops.py")
            continue
        d = table[k]
        name = d.surface.format(kind="*") or k.__name__
        out.extend(f"{name}: no {rule}" for rule, have in regs.items()
                   if k not in have and not (d.internal and rule in SURFACE_RULES))
    return out


def test_every_statement_kind_has_every_rule():
    assert missing(registries(), tileops.STMTS) == []


def test_a_missing_rule_is_named():
    regs = registries()
    regs["JIT emitter (jit/lower.py)"] = dict(regs["JIT emitter (jit/lower.py)"])
    del regs["JIT emitter (jit/lower.py)"][S.Cumsum]
    regs["docs/language.md entry"] = dict(regs["docs/language.md entry"])
    del regs["docs/language.md entry"][S.Reduce]
    table = dict(tileops.STMTS)
    del table[S.Fill]
    assert missing(regs, table) == ["Fill: no entry in ir/tileops.py",
                                    "T.reduce_*: no docs/language.md entry",
                                    "T.cumsum: no JIT emitter (jit/lower.py)"]


def test_a_kind_only_passes_make_needs_no_surface_but_ir_docs():
    regs = registries()
    assert S.Versioned not in regs["front-end binding (tilepy/language.py)"]
    assert missing(regs, tileops.STMTS) == []
    regs["docs/ir.md entry"] = {k: True for k in KINDS if k is not S.Versioned}
    regs["interpreter rule (interpreter/control.py)"] = dict(
        regs["interpreter rule (interpreter/control.py)"])
    del regs["interpreter rule (interpreter/control.py)"][S.Versioned]
    assert missing(regs, tileops.STMTS) == [
        "Versioned: no interpreter rule (interpreter/control.py)",
        "Versioned: no docs/ir.md entry"]


def test_the_docs_check_reads_the_brace_form():
    assert _documented("T.reduce_{sum,max,min,abssum,absmax}", S.Reduce)
    assert not _documented("T.reduce_{sum,max}", S.Reduce)
    assert _documented("T.cumsum(src, dst)", S.Cumsum)
