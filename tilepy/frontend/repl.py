"""Finding the source of a function typed at the standard Python prompt, which before 3.13
keeps none (the file is `<stdin>`): `recover(fn)` looks for its `def` in readline's
history, accepts it only if compiling it gives exactly `fn`'s code object, and registers it
in linecache so error messages can show its lines. Builds no IR.
"""

from __future__ import annotations
import __future__

import inspect
import linecache
import sys
import types

_FUTURE_FLAGS = 0
for _name in __future__.all_feature_names:
    _FUTURE_FLAGS |= getattr(__future__, _name).compiler_flag
_MAX_LINES = 5000  # how far back the history is searched
_MAX_ENDS = 3  # statement ends tried per start (a def inside if/else or try/except)


def recover(fn) -> tuple[list[str], int, str] | None:
    """(fn's lines, its first line number, a linecache name), as
    `inspect.getsourcelines` gives them, or None when the history does not hold it (or
    the prompt does not use readline)."""
    code = getattr(fn, "__code__", None)
    readline = sys.modules.get("readline")
    if code is None or code.co_filename != "<stdin>" or readline is None:
        return None
    lines, base = _history(readline)
    first = code.co_firstlineno
    for start in range(len(lines) - 1, -1, -1):
        head = start + first - 1
        if not _top_level(lines[start]) or head >= len(lines) or \
                not lines[head].lstrip().startswith(("@", "def ", "async def ")):
            continue
        for end in _ends(lines, head):
            chunk = lines[start:end]
            if _defines(chunk, code):
                name = f"<stdin#{base + start}>"
                text = [line + "\n" for line in chunk]
                linecache.cache[name] = (sum(map(len, text)), None, text, name)
                return inspect.getblock(text[first - 1:]), first, name
    return None


def _history(readline) -> tuple[list[str], int]:
    """The last lines of readline's history (a pasted block may be one multi-line item),
    and the 1-based number of the first of them."""
    items = []
    for i in range(readline.get_current_history_length() + 1):
        item = readline.get_history_item(i)  # GNU readline counts from 1, libedit from 0
        if item is not None:
            items.extend(item.split("\n"))
    lines = items[-_MAX_LINES:]
    return lines, len(items) - len(lines) + 1


def _top_level(line: str) -> bool:
    return bool(line) and not line[0].isspace() and not line.startswith("#")


def _ends(lines: list[str], head: int):
    """Candidate ends (exclusive) of a statement whose `def` line is `head`: before each of
    the next unindented lines, and the end of the history."""
    found = 0
    for i in range(head + 1, len(lines)):
        if _top_level(lines[i]):
            yield i
            found += 1
            if found == _MAX_ENDS:
                return
    yield len(lines)


def _defines(chunk: list[str], code: types.CodeType) -> bool:
    try:
        module = compile("\n".join(chunk) + "\n", "<stdin>", "exec",
                         flags=code.co_flags & _FUTURE_FLAGS, dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    todo = [module]
    while todo:
        c = todo.pop()
        if c == code:
            return True
        todo.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    return False
