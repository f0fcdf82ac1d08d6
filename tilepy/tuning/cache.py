"""The tuning cache: one SQLite file in the tilepy cache dir, shared by processes (WAL
journal, busy timeout), mapping a tuning key to the best config and what was measured.
A file that SQLite cannot read is moved aside (with a warning) and a new one is made.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
import warnings
from pathlib import Path

FILE = "autotune.sqlite"
TIMEOUT_S = 30.0
_SCHEMA = ("CREATE TABLE IF NOT EXISTS tuned (key TEXT PRIMARY KEY, config TEXT NOT NULL, "
           "seconds REAL NOT NULL, tried TEXT NOT NULL, meta TEXT NOT NULL, "
           "saved REAL NOT NULL)")
_checked: set[str] = set()  # files this process has opened and checked once


class TuneCacheWarning(UserWarning):
    """The tuning cache file was unreadable and has been replaced by an empty one."""


def default_path() -> Path:
    from tilepy.profiling.roofline import cache_root

    return cache_root() / FILE


def connect(path: Path | None = None) -> sqlite3.Connection:
    """An open connection to the cache (made, checked and repaired as needed)."""
    path = Path(path) if path is not None else default_path()
    try:
        return _open(path)
    except sqlite3.DatabaseError as err:  # not a database, malformed, unreadable header
        _set_aside(path, err)
        return _open(path)


def _open(path: Path) -> sqlite3.Connection:
    con = sqlite3.connect(str(path), timeout=TIMEOUT_S, isolation_level=None)
    try:
        con.execute(f"PRAGMA busy_timeout = {int(TIMEOUT_S * 1000)}")
        con.execute("PRAGMA journal_mode = WAL")
        con.execute(_SCHEMA)
        if str(path) not in _checked:
            ok = con.execute("PRAGMA quick_check").fetchone()[0]
            if ok != "ok":
                raise sqlite3.DatabaseError(ok)
            _checked.add(str(path))
    except BaseException:
        con.close()
        raise
    return con


def _set_aside(path: Path, err: Exception) -> None:
    aside = path.with_name(f"{path.name}.corrupt-{os.getpid()}-{int(time.time())}")
    os.replace(path, aside)
    for suffix in ("-wal", "-shm"):
        side = Path(str(path) + suffix)
        if side.exists():
            os.replace(side, Path(str(aside) + suffix))
    _checked.discard(str(path))
    warnings.warn(f"tilepy: the autotune cache {path} could not be read ({err}); it was "
                  f"moved to {aside.name} and a new, empty cache was made (configs will be "
                  "tuned again)", TuneCacheWarning, stacklevel=4)


def load(key: str, path: Path | None = None) -> dict | None:
    """The saved entry for `key` ({config, seconds, tried, meta}), or None."""
    con = connect(path)
    try:
        row = con.execute("SELECT config, seconds, tried, meta FROM tuned WHERE key = ?",
                          (key,)).fetchone()
    except sqlite3.DatabaseError as err:
        con.close()
        _set_aside(Path(path) if path else default_path(), err)
        return None
    finally:
        con.close()
    if row is None:
        return None
    return {"config": json.loads(row[0]), "seconds": row[1], "tried": json.loads(row[2]),
            "meta": json.loads(row[3])}


def save(key: str, config: dict, seconds: float, tried: list, meta: dict,
         path: Path | None = None) -> None:
    """Record the best config for `key` (the last writer wins when processes race)."""
    con = connect(path)
    try:
        con.execute("INSERT OR REPLACE INTO tuned VALUES (?, ?, ?, ?, ?, ?)",
                    (key, json.dumps(config, default=str), float(seconds),
                     json.dumps(tried, default=str), json.dumps(meta, default=str),
                     time.time()))
    finally:
        con.close()


def clear(path: Path | None = None) -> int:
    """Forget every tuned config; the number of entries removed."""
    con = connect(path)
    try:
        return con.execute("DELETE FROM tuned").rowcount
    finally:
        con.close()
