"""Teaching views of a kernel's run: which global tiles each block reads and writes, in
order, and how often each shared/fragment tile is reused, as one self-contained HTML page
with a step slider (`TraceView.html`) or a PNG (`TraceView.save_png`, matplotlib).

Owns recording the run (the interpreter's trace hook, blocks one at a time) and drawing
it. The page's layout is computed here (`layout`), so tests can find a tile's pixels.
"""

from __future__ import annotations

import html
import json
from dataclasses import asdict, dataclass

import numpy as np

from tilepy.boundary import api_boundary
from tilepy.kernel import Kernel, _caller_loc, bind_arguments
from tilepy.views.png import COLORS, draw

PANEL = 260      # pixels of the larger side of each global buffer's drawing
TOP, LEFT, GAP = 70, 20, 40


@dataclass(frozen=True)
class Step:
    """One global access of one block: its region (None: element accesses of a
    T.Parallel loop, drawn as the whole buffer), the statement's line, and the gemms this
    block ran since its previous global access (shared/fragment reuse)."""
    index: int
    block: tuple
    kind: str          # "load" | "store"
    buffer: str
    starts: tuple | None
    extents: tuple | None
    op: str
    line: int
    gemms_before: int


@dataclass(frozen=True)
class Panel:
    buffer: str
    shape: tuple       # as drawn: (rows, cols), 1-D buffers as one row
    x: int
    y: int
    scale: float       # pixels per element


class TraceView:
    """The recorded run of `kernel` on `arrays` (the interpreter, blocks in order)."""

    def __init__(self, kernel: Kernel, steps: list, shapes: dict, grid: tuple):
        self.kernel, self.steps, self.shapes, self.grid = kernel, steps, shapes, grid

    def layout(self) -> list[Panel]:
        """Where each global buffer is drawn on the page (left to right)."""
        panels, x = [], LEFT
        for name, shape in self.shapes.items():
            rows, cols = _as_2d(shape)
            scale = PANEL / max(rows, cols)
            panels.append(Panel(name, (rows, cols), x, TOP, scale))
            x += int(cols * scale) + GAP
        return panels

    def rect(self, step: Step, panel: Panel) -> tuple[int, int, int, int]:
        """(x, y, width, height) of a step's region on the page, in pixels."""
        r0, c0, nr, nc = _region(step, self.shapes[panel.buffer], panel.shape)
        s = panel.scale
        return (panel.x + int(c0 * s), panel.y + int(r0 * s), max(1, int(nc * s)),
                max(1, int(nr * s)))

    def html(self, step: int | None = None) -> str:
        """A self-contained page: a slider over the steps, each buffer's accessed tiles
        (current: dark, earlier: light), the step's block, region, line and reuse.
        `#step=N` in the URL (or `step`) opens it at step N."""
        panels = self.layout()
        data = {"steps": [asdict(s) for s in self.steps], "colors": COLORS,
                "panels": [asdict(p) for p in panels],
                "rects": [[list(self.rect(s, p)) if p.buffer == s.buffer else None
                           for p in panels] for s in self.steps],
                "start": len(self.steps) - 1 if step is None else step}
        width = max(p.x + int(p.shape[1] * p.scale) for p in panels) + LEFT
        height = TOP + max(int(p.shape[0] * p.scale) for p in panels) + 60
        return _PAGE.format(title=html.escape(self.kernel.name), width=width, height=height,
                            data=json.dumps(data), n=len(self.steps) - 1)

    def save_html(self, path: str, step: int | None = None) -> None:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(self.html(step))

    def _repr_html_(self) -> str:
        return (f'<iframe srcdoc="{html.escape(self.html())}" style="width:100%;'
                f'height:{TOP + PANEL + 90}px;border:0"></iframe>')

    def save_png(self, path: str, step: int | None = None) -> None:
        """The page's picture at `step` (default: the last), drawn with matplotlib."""
        draw(self, len(self.steps) - 1 if step is None else step, path)

    def __repr__(self) -> str:
        loads = sum(s.kind == "load" for s in self.steps)
        return (f"<TraceView {self.kernel.name} grid={self.grid} {len(self.steps)} steps "
                f"({loads} loads, {len(self.steps) - loads} stores)>")


def _as_2d(shape) -> tuple[int, int]:
    if len(shape) == 1:
        return 1, int(shape[0])
    rows = 1
    for d in shape[:-1]:
        rows *= int(d)
    return rows, int(shape[-1])


def _region(step: Step, shape, shape2d) -> tuple[int, int, int, int]:
    """(row0, col0, rows, cols) of the step's region on the 2-D drawing, clipped; leading
    dimensions fold into rows (the drawn span bounds the region)."""
    rows, cols = shape2d
    if step.starts is None:
        return 0, 0, rows, cols
    st, ex = list(step.starts), list(step.extents)
    if len(st) == 1:
        st, ex, shape = [0] + st, [1] + ex, (1,) + tuple(shape)
    lead = tuple(int(d) for d in shape[:-1])
    first = [min(max(a, 0), d - 1) for a, d in zip(st[:-1], lead)]
    last = [min(max(a + e - 1, 0), d - 1) for a, e, d in zip(st[:-1], ex[:-1], lead)]
    r0 = int(np.ravel_multi_index(first, lead))
    r1 = int(np.ravel_multi_index(last, lead)) + 1
    c0 = max(0, st[-1])
    return r0, c0, max(0, r1 - r0), max(0, min(cols, st[-1] + ex[-1]) - c0)


@api_boundary
def trace(kernel: Kernel, *arrays) -> TraceView:
    """Run `kernel` on `arrays` in the interpreter (blocks one at a time) and record its
    global loads and stores and its gemms, for `TraceView.html()` / `.save_png()`."""
    from tilepy.interpreter import Recorder, run

    func = kernel.func
    bound, sizes = bind_arguments(func, arrays, _caller_loc())
    rec = Recorder()
    run(func, bound, sizes, trace=rec, batch=False)
    steps, gemms, grid = [], 0, ()
    for kind, ev in rec.events:
        if kind == "launch":
            grid = tuple(ev[1])
        elif kind == "block":
            gemms = 0
        elif kind == "gemm":
            gemms += 1
        elif kind in ("load", "store"):
            steps.append(Step(len(steps), tuple(ev.block), kind, ev.buffer,
                              None if ev.starts is None else tuple(ev.starts),
                              None if ev.extents is None else tuple(ev.extents),
                              ev.op, ev.loc.line, gemms))
            gemms = 0
    shapes = {b.name: tuple(bound[b.name].shape) for b in func.params}
    return TraceView(kernel, steps, shapes, grid)


_PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{title}: trace</title>
<style>
body {{ margin: 0; font: 13px monospace; background: #fff; }}
#bar {{ position: absolute; left: 20px; top: 10px; }}
#info {{ position: absolute; left: 20px; top: 38px; white-space: pre; }}
.name {{ position: absolute; font-weight: bold; }}
svg {{ position: absolute; left: 0; top: 0; }}
</style></head>
<body style="width:{width}px;height:{height}px">
<div id="bar"><input id="step" type="range" min="0" max="{n}" value="0" style="width:400px">
<span id="count"></span></div>
<div id="info"></div>
<svg id="view" width="{width}" height="{height}"></svg>
<script>
const D = {data};
const svg = document.getElementById("view");
const NS = "http://www.w3.org/2000/svg";
function rect(x, y, w, h, fill, stroke) {{
  const r = document.createElementNS(NS, "rect");
  r.setAttribute("x", x); r.setAttribute("y", y); r.setAttribute("width", w);
  r.setAttribute("height", h); r.setAttribute("fill", fill);
  if (stroke) {{ r.setAttribute("stroke", stroke); }}
  svg.appendChild(r);
}}
function label(p) {{
  const t = document.createElementNS(NS, "text");
  t.setAttribute("x", p.x); t.setAttribute("y", p.y - 6); t.textContent =
    p.buffer + " [" + p.shape[0] + " x " + p.shape[1] + "]";
  svg.appendChild(t);
}}
function draw(i) {{
  while (svg.firstChild) {{ svg.removeChild(svg.firstChild); }}
  D.panels.forEach((p, j) => {{
    rect(p.x, p.y, Math.round(p.shape[1] * p.scale), Math.round(p.shape[0] * p.scale),
         "#f4f4f4", "#999");
    label(p);
    for (let k = 0; k < i; k++) {{
      const r = D.rects[k][j];
      if (r) {{ rect(r[0], r[1], r[2], r[3], D.colors["past_" + D.steps[k].kind]); }}
    }}
    const r = D.rects[i][j];
    if (r) {{ rect(r[0], r[1], r[2], r[3], D.colors[D.steps[i].kind]); }}
  }});
  const s = D.steps[i];
  const where = s.starts === null ? "elements" :
    s.starts.map((a, k) => a + ":" + (a + s.extents[k])).join(", ");
  document.getElementById("count").textContent = "step " + i + " / " + (D.steps.length - 1);
  document.getElementById("info").textContent = "block (" + s.block.join(", ") + ") " +
    s.kind + " " + s.buffer + "[" + where + "] by " + s.op + " at line " + s.line +
    (s.kind === "store" || s.gemms_before ? "; " + s.gemms_before +
     " gemm(s) on shared/fragment tiles since the previous access" : "");
}}
const slider = document.getElementById("step");
slider.addEventListener("input", () => draw(Number(slider.value)));
const m = /step=(\\d+)/.exec(location.hash);
slider.value = m ? Number(m[1]) : D.start;
draw(Number(slider.value));
</script></body></html>
"""
