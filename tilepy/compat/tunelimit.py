"""The opt-in limit on how many of a TileLang program's autotune configs are measured
(`TILEPY_AUTOTUNE_CONFIGS`, `tilepy run --tilelang --autotune-configs`). Owns the value's
grammar, the deterministic choice of the subset and its log line; the default measures all,
as TileLang does.
"""

from __future__ import annotations

import os
import sys

from tilepy.errors import TuneError

ENV = "TILEPY_AUTOTUNE_CONFIGS"
_FORMS = "all, first, a count N (the first N) or random:N[:SEED] (a seeded sample)"


def parse(text: str) -> tuple[int | None, int | None]:
    """`(count, seed)` of a limit's text: count None for all, seed None for the first ones."""
    word = text.strip().lower()
    if word in ("", "all"):
        return None, None
    if word == "first":
        return 1, None
    parts = word.split(":")
    try:
        if parts[0] == "random" and len(parts) in (2, 3):
            count, seed = int(parts[1]), int(parts[2]) if len(parts) == 3 else 0
        elif len(parts) == 1:
            count, seed = int(parts[0]), None
        else:
            raise ValueError
    except ValueError:
        count = 0
    if count < 1 or (seed is not None and seed < 0):
        raise TuneError(f"{ENV} (or --autotune-configs) must be {_FORMS}; got {text!r}",
                        hint=f"e.g. {ENV}=first, {ENV}=8 or {ENV}=random:8:0")
    return count, seed


def pick(configs: list[dict], text: str | None = None) -> list[dict]:
    """The configs to measure under the limit (`text`, else the environment's), in the
    program's order; a line on stderr says which when fewer than all are kept."""
    text = os.environ.get(ENV, "") if text is None else text
    count, seed = parse(text)
    if count is None or count >= len(configs):
        return configs
    if seed is None:
        kept = list(range(count))
    else:
        import numpy as np

        kept = sorted(int(i) for i in np.random.default_rng(seed).choice(
            len(configs), count, replace=False))
    print(f"tilepy: autotune measures {count} of {len(configs)} configs ({ENV}={text}): "
          f"numbers {', '.join(str(i) for i in kept[:8])}{' ...' if count > 8 else ''} "
          f"(from 0, in the program's order); TileLang measures all", file=sys.stderr)
    return [configs[i] for i in kept]
