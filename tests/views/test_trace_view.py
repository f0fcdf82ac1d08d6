"""tilepy.views: a kernel's trace (global tiles each block reads and writes, in order, and
the gemms between), its HTML page rendered by a real headless Chromium (pixels at the
layout's tile positions compared with the colours the page must draw) and its PNG."""

import shutil
import struct
import subprocess
import zlib

import numpy as np
import pytest

from tilepy.kernels import gemm
from tilepy.views import trace
from tilepy.views.trace import COLORS

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def view():
    k = gemm(32, 32, 16, "float32", "float32")
    return trace(k, np.ones((64, 48), np.float32), np.ones((48, 96), np.float32))


def test_steps_follow_each_block_in_program_order(view):
    assert view.grid == (3, 2) and len(view.steps) == 6 * (3 * 2 + 1)
    first = [(s.kind, s.buffer, s.starts, s.extents) for s in view.steps[:7]]
    assert first == [("load", "A", (0, 0), (32, 16)), ("load", "B", (0, 0), (16, 32)),
                     ("load", "A", (0, 16), (32, 16)), ("load", "B", (16, 0), (16, 32)),
                     ("load", "A", (0, 32), (32, 16)), ("load", "B", (32, 0), (16, 32)),
                     ("store", "C", (0, 0), (32, 32))]
    assert [s.gemms_before for s in view.steps[:7]] == [0, 0, 1, 0, 1, 0, 1]
    assert view.steps[7].block == (1, 0) and view.steps[7].starts == (0, 0)
    assert view.steps[8].starts == (0, 32)  # block (1, 0) reads B's second column tile


def test_the_page_is_self_contained(view):
    page = view.html()
    assert page.startswith("<!DOCTYPE html>") and 'type="range"' in page
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    assert "https://" not in page and "src=" not in page


def _png_pixels(path):
    """RGB(A) pixels of an 8-bit non-interlaced PNG (what Chromium and Agg write)."""
    with open(path, "rb") as fh:
        data = fh.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and ctype in (2, 6)
            ch = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    out = np.zeros((h, w * ch), np.int32)
    stride = w * ch
    prev = np.zeros(stride, np.int32)
    for y in range(h):
        f, line = raw[y * (stride + 1)], np.frombuffer(
            raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)], np.uint8).astype(np.int32)
        cur = line.copy()
        for x in range(stride):
            a = cur[x - ch] if x >= ch else 0
            b, c = prev[x], (prev[x - ch] if x >= ch else 0)
            if f == 1:
                cur[x] = (line[x] + a) & 255
            elif f == 2:
                cur[x] = (line[x] + b) & 255
            elif f == 3:
                cur[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                cur[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        out[y], prev = cur, cur
    return out.reshape(h, w, ch)[:, :, :3]


def _rgb(hexcolor):
    return [int(hexcolor[i:i + 2], 16) for i in (1, 3, 5)]


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (apt install chromium)")
def test_chromium_renders_the_step_the_url_names(view, tmp_path):
    page = tmp_path / "trace.html"
    view.save_html(str(page))
    shot = tmp_path / "shot.png"
    step = 10  # block (1, 0) loads B[16:32, 32:64]
    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                    "--hide-scrollbars", "--force-device-scale-factor=1",
                    f"--screenshot={shot}", "--window-size=900,400",
                    f"file://{page}#step={step}"], capture_output=True, timeout=120,
                   check=True)
    px = _png_pixels(str(shot))
    panels = {p.buffer: p for p in view.layout()}

    def at(s, buffer):
        x, y, w, h = view.rect(view.steps[s], panels[buffer])
        return list(px[y + h // 2, x + w // 2])
    assert view.steps[step].kind == "load" and view.steps[step].buffer == "B"
    assert at(step, "B") == _rgb(COLORS["load"])            # the step's tile
    assert at(8, "B") == _rgb(COLORS["past_load"])          # an earlier B tile
    assert at(6, "C") == _rgb(COLORS["past_store"])         # block (0, 0)'s C tile
    p = panels["C"]
    assert list(px[p.y + int(60 * p.scale), p.x + int(90 * p.scale)]) == _rgb("#f4f4f4")


def test_png_of_a_step(view, tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "trace.png"
    view.save_png(str(path), step=10)
    px = _png_pixels(str(path))
    assert px.shape[2] == 3 and px.shape[0] > 200
    assert (np.abs(px - _rgb(COLORS["load"])).sum(-1) < 10).sum() > 100
