"""A TraceView drawn with matplotlib (the `viz` extra), the same picture as the HTML page
at one step: each global buffer, earlier accesses light, the step's access dark."""

from __future__ import annotations

COLORS = {"load": "#1f6fd1", "store": "#e8731a", "past_load": "#b9d3f3",
          "past_store": "#f7d2b3"}  # the step's access, earlier accesses (page and PNG)


def draw(view, step: int, path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Rectangle
    except ImportError:
        from tilepy.validation.errors import ConfigError

        raise ConfigError("TraceView.save_png needs matplotlib, which is not installed",
                          "pip install 'tilepy-runtime[viz]'") from None
    panels = view.layout()
    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels), 3.6), squeeze=False)
    for ax, p in zip(axes[0], panels):
        rows, cols = p.shape
        ax.add_patch(Rectangle((0, 0), cols, rows, facecolor="#f4f4f4", edgecolor="#999"))
        for s in view.steps[:step + 1]:
            if s.buffer != p.buffer:
                continue
            x, y, w, h = view.rect(s, p)
            color = COLORS[s.kind] if s.index == step else COLORS["past_" + s.kind]
            ax.add_patch(Rectangle(((x - p.x) / p.scale, (y - p.y) / p.scale), w / p.scale,
                                   h / p.scale, facecolor=color))
        ax.set_xlim(0, cols)
        ax.set_ylim(rows, 0)
        ax.set_aspect("equal")
        ax.set_title(f"{p.buffer} [{rows} x {cols}]", fontsize=9)
    s = view.steps[step]
    fig.suptitle(f"{view.kernel.name} step {step}/{len(view.steps) - 1}: block {s.block} "
                 f"{s.kind} {s.buffer} (line {s.line})", fontsize=9)
    fig.savefig(path, dpi=80)
    plt.close(fig)
