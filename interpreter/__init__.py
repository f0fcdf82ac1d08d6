"""tilepy.interpreter: executes tile IR with numpy + ml_dtypes; the ground truth.

Owns the numerics of every op as the op table defines them, the sanitizers and tracing.
Never imports numba.
"""

from tilepy.interpreter.masking import Masked, MaskReport
from tilepy.interpreter.schedule import run
from tilepy.interpreter.trace import Access, GemmEvent, Listener, Recorder

__all__ = ["Access", "GemmEvent", "Listener", "MaskReport", "Masked", "Recorder", "run"]
