"""tilepy.views: teaching views of kernels (front-end layer). `trace(kernel, *arrays)`
records which global tiles each block reads and writes, in order, and draws it as one
self-contained HTML page with a step slider or as a PNG (docs/validate.md, "Views")."""

from tilepy.views.trace import Step, TraceView, trace

__all__ = ["Step", "TraceView", "trace"]
