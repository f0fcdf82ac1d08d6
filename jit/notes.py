"""What the JIT tells the user while it works, on the "tilepy" logger: one line when a
kernel is compiled ("compiling <kernel> (first call; cached afterwards)"), so the seconds a
first call takes are not a silent hang. Said before the compile, unless the disk cache
holds the kernel's machine code: a load says nothing, unless it turns out to take
`SLOW_LOAD` seconds (an entry that does not fit, which Numba compiles again).

Shown by default: while the application has set up no logging at all (no handler on the
root logger or on "tilepy", and no level on "tilepy"), the line goes to stderr through a
handler of this module. Otherwise the logging configuration decides, as for any library
logger (INFO level). Silence it with TILEPY_QUIET=1 or
`logging.getLogger("tilepy").setLevel(logging.WARNING)`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading

LOGGER = "tilepy"
SLOW_LOAD = 2.0  # seconds: far longer than a load from the disk cache
_FORMAT = logging.Formatter("tilepy: %(message)s")


def quiet() -> bool:
    return os.environ.get("TILEPY_QUIET", "").strip().lower() not in ("", "0", "false", "no")


def note(message: str, *args) -> None:
    """Tell the user `message % args` at INFO level (see the module docstring)."""
    if quiet():
        return
    log = logging.getLogger(LOGGER)
    if log.manager.disable >= logging.INFO:  # logging.disable(...)
        return
    if log.isEnabledFor(logging.INFO):
        log.info(message, *args)
    elif log.level == logging.NOTSET and not log.handlers and not logging.getLogger().handlers:
        to_stderr = logging.StreamHandler(sys.stderr)  # sys.stderr as it is now
        to_stderr.setFormatter(_FORMAT)
        to_stderr.handle(log.makeRecord(LOGGER, logging.INFO, __file__, 0, message, args,
                                        None))


@contextlib.contextmanager
def compiling(kernel: str, cached: bool, slow: float | None = None):
    """Say "compiling <kernel> ..." now, or (`cached`: the disk cache should serve it) only
    if the block has not finished after `slow` seconds (default SLOW_LOAD)."""
    message, args = "compiling %s (first call; cached afterwards)", (kernel,)
    if not cached:
        note(message, *args)
        yield
        return
    timer = threading.Timer(SLOW_LOAD if slow is None else slow, note, (message, *args))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
