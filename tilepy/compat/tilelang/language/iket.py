"""`T.iket`: TileLang's IKET event tracing of CUDA kernels. In a kernel, `mark`,
`range_push` / `range_pop` and `with range(name):` are recorded as hints of the kernel
(frontend/events.py) and change no value; on the CPU no trace is written, so
`trace_files()` is empty and `event_table()` lists no events. The host-side session and
output-directory helpers behave as TileLang's, so programs that save files there run.
"""

from __future__ import annotations

import os
from pathlib import Path

from tilepy.frontend.surface import Builtin

mark = Builtin("iket_mark")
range_push = Builtin("iket_range_push")
range_start = Builtin("iket_range_start")
range_pop = Builtin("iket_range_pop")
range_end = Builtin("iket_range_end")
range = Builtin("iket_range")  # noqa: A001 - TileLang's name: `with T.iket.range(name):`
payload = Builtin("iket_payload")

_state = {"enabled": False, "payloads": False, "output_dir": None}
_ENV = "TL_IKET_OUTPUT_DIR"


def enable(*, override: bool = True) -> None:
    _state["enabled"] = True


def disable(*, restore: bool = True) -> None:
    _state["enabled"] = False


def is_enabled() -> bool:
    return _state["enabled"]


def reset() -> None:
    """Forget registered events: there are none on the CPU reference."""


def event_table() -> list:
    return []


def enable_runtime_payloads() -> None:
    _state["payloads"] = True


def disable_runtime_payloads() -> None:
    _state["payloads"] = False


def runtime_payloads_enabled() -> bool:
    return _state["payloads"]


def set_output_dir(path) -> Path | None:
    if path is None:
        _state["output_dir"] = None
        os.environ.pop(_ENV, None)
        return None
    _state["output_dir"] = Path(path).expanduser().absolute()
    _state["output_dir"].mkdir(parents=True, exist_ok=True)
    os.environ[_ENV] = str(_state["output_dir"])
    return _state["output_dir"]


def output_dir(default=None) -> Path | None:
    if _state["output_dir"] is not None:
        return _state["output_dir"]
    given = os.environ.get(_ENV) or default
    return Path(given).expanduser().absolute() if given else None


def output_path(name: str, *, directory=None) -> Path:
    base = output_dir(directory)
    if base is None:
        raise RuntimeError("IKET output directory is not configured: pass directory= or "
                           "use T.iket.session(output_dir=...)")
    base.mkdir(parents=True, exist_ok=True)
    return base / name


def trace_files(*, directory=None) -> list[Path]:
    """IKET traces written by a GPU run: none on the CPU reference."""
    return []


class session:  # noqa: N801 - TileLang's name
    """`with T.iket.session(output_dir=..., runtime_payloads=...):` around one compile."""

    def __init__(self, *, reset_events=True, override=True, disable_on_exit=True,
                 output_dir=None, runtime_payloads=None):
        self.disable_on_exit, self.dir, self.payloads = disable_on_exit, output_dir, \
            runtime_payloads

    def __enter__(self):
        self.saved = dict(_state), os.environ.get(_ENV)
        if self.dir is not None:
            set_output_dir(self.dir)
        if self.payloads is not None:
            _state["payloads"] = bool(self.payloads)
        enable()
        return self

    def __exit__(self, *exc):
        state, env = self.saved
        _state.update(state, enabled=_state["enabled"] and not self.disable_on_exit)
        if env is None:
            os.environ.pop(_ENV, None)
        else:
            os.environ[_ENV] = env
        return False
