"""Graph passes, each a function Graph -> Graph listed in order in PASSES. A pass builds its
new ops from the old ops' index expressions (fuse.py), so what it emits is ordinary tile IR
that either backend runs; tests compare the graph before and after, bit for bit.
"""

from __future__ import annotations

import dataclasses
import os

from tilepy.ir.expr import Const, Load, Var
from tilepy.tileop import schedule
from tilepy.tileop.backtoback import match_b2b
from tilepy.tileop.fuse import fuse_bodies, is_elementwise, loads_identity
from tilepy.tileop.graph import Graph, Node
from tilepy.tileop.implicit import match_implicit
from tilepy.tileop.inline import dedupe_reductions, inline_body, merge_params, reads
from tilepy.tileop.lower import match_gemm, reds_of
from tilepy.tileop.op import TileOp


def fuse_epilogues(g: Graph) -> Graph:
    """An element-wise op whose input is the only use of another op's (single) output, read
    at the same indices, is folded into that op: its expression reads the producer's
    expression, rounded to the producer's output dtype (what the unfused graph stored), so
    the fused kernel gives the same bits. Repeats until nothing fuses."""
    nodes = list(g.nodes)
    changed = True
    while changed:
        changed = False
        for ci, cons in enumerate(nodes):
            pi, k = _producer(nodes, g, cons)
            if pi is None:
                continue
            prod = nodes[pi]
            body = fuse_bodies(prod.op.body, cons.op.body, k)
            op = TileOp(None, body=body, tiles=_user_tiles(prod.op, body))
            rest = [v for n, v in enumerate(cons.inputs) if n != k]
            # at the consumer's place: its other inputs may come from nodes after the
            # producer's, and no node between reads the producer's output (its one use)
            nodes[ci] = Node(op, prod.inputs + rest, cons.outputs)
            del nodes[pi]
            changed = True
            break
    return Graph(g.inputs, nodes, g.outputs)


def _user_tiles(op, body) -> dict:
    known = set(body.index) | {r.name for r in body.reds}
    return {k: v for k, v in op.user_tiles.items() if k in known}


def _producer(nodes: list[Node], g: Graph, cons: Node):
    """(index of the producing node, which input) when cons fuses into its producer."""
    if len(cons.outputs) != 1 or not is_elementwise(cons.op.body):
        return None, None
    for k, v in enumerate(cons.inputs):
        pi = next((n for n, p in enumerate(nodes) if v in p.outputs), None)
        if pi is None or len(nodes[pi].outputs) != 1 or v in g.outputs:
            continue
        uses = sum(x is v for n in nodes for x in n.inputs)
        same = v.shape == cons.outputs[0].shape
        if uses == 1 and same and loads_identity(cons.op.body, k):
            return pi, k
    return None, None


def fuse_producers(g: Graph) -> Graph:
    """Reduction and prologue fusion: a producer whose every use can take it is inlined into
    each consumer (its expression read at the consumer's indices, rounded to its output
    dtype), and removed. Element-wise producers go first (into row reductions: softmax's
    exp-sub into its sum and its division; into a contraction's operand: a prologue computed
    on the tile load), then row reductions into consumers that read them at their own
    indices (softmax's max and sum into the division). Repeats until nothing fuses."""
    nodes = list(g.nodes)
    while _inline_one(nodes, g, True) or _inline_one(nodes, g, False):
        pass
    return Graph(g.inputs, nodes, g.outputs)


def _inline_one(nodes: list[Node], g: Graph, elementwise: bool) -> bool:
    for pi, prod in enumerate(nodes):
        body = prod.op.body
        if len(prod.outputs) != 1 or prod.outputs[0] in g.outputs or \
                is_elementwise(body) != elementwise or _scheduled_as_gemm(body):
            continue
        v = prod.outputs[0]
        users = [(ci, k) for ci, c in enumerate(nodes) for k, x in enumerate(c.inputs)
                 if x is v]
        fused = [_inlined(prod, nodes[ci], k, elementwise) for ci, k in users]
        if not users or None in fused:
            continue
        for (ci, _), node in zip(users, fused):
            nodes[ci] = node
        del nodes[pi]
        return True
    return False


def _inlined(prod: Node, cons: Node, k: int, elementwise: bool) -> Node | None:
    """cons with prod inlined for its input k, or None where that does not fuse."""
    if sum(x is cons.inputs[k] for x in cons.inputs) != 1:
        return None
    cb = cons.op.body
    name = cb.sig.params[k].name
    lds = [ld for e in cb.outs + [r.body for r in cb.reds] for ld in reads(e, name)]
    if not elementwise and not all(isinstance(x, Var) and x.name in cb.index or
                                   isinstance(x, Const) for ld in lds for x in ld.indices):
        return None  # a reduction is inlined only where it is read at the output's indices
    body = inline_body(prod.op.body, cb, k)
    inputs = [x for n, x in enumerate(cons.inputs) if n != k] + list(prod.inputs)
    body, inputs = merge_params(body, inputs)
    body = dedupe_reductions(body)
    if _scheduled_as_gemm(cb) and not _scheduled_as_gemm(body):
        return None  # a prologue the contraction's lowering cannot take
    return Node(TileOp(None, body=body, tiles=_user_tiles(cons.op, body)), inputs,
                cons.outputs)


def _scheduled_as_gemm(body) -> bool:
    """Some output is lowered as a contraction (T.gemm, explicit or implicit)."""
    for e, out in zip(body.outs, body.sig.outputs):
        names = list(body.index)[:len(out.shape)]
        if match_gemm(body, e, names) or match_implicit(body, e, names, reds_of(body, e)):
            return True
    return False


def fuse_back_to_back(g: Graph) -> Graph:
    """Back-to-back gemm fusion: a gemm (with its epilogue) whose output's only use is the
    A operand of another gemm becomes one op, computed per block of rows with the
    intermediate in a block-local tile (tilepy/tileop/backtoback.py): the same folds in the
    same order, so the unfused graph's bits. The second gemm's output columns must fit
    one block (else each column block would recompute the intermediate)."""
    nodes = list(g.nodes)
    changed = True
    while changed:
        changed = False
        for ci, cons in enumerate(nodes):
            got = _back_to_back(nodes, g, cons)
            if got is not None:
                pi, nodes[ci] = got  # at the consumer's place, as fuse_epilogues does
                del nodes[pi]
                changed = True
                break
    return Graph(g.inputs, nodes, g.outputs)


def _back_to_back(nodes: list[Node], g: Graph, cons: Node):
    """(producer's index, the fused node) when cons's A operand is a gemm's only use."""
    gm = _plain_gemm(cons)
    if gm is None:
        return None
    k = [b.name for b in cons.op.body.sig.params].index(gm.a.buffer.name)
    v = cons.inputs[k]
    pi = next((n for n, p in enumerate(nodes) if v in p.outputs), None)
    uses = sum(x is v for n in nodes for x in n.inputs)
    if pi is None or uses != 1 or v in g.outputs or len(nodes[pi].outputs) != 1:
        return None
    prod = nodes[pi]
    pm = _plain_gemm(prod)
    reads_v = [ld for e in cons.op.body.outs + [r.body for r in cons.op.body.reds]
               for ld in reads(e, gm.a.buffer.name)]
    if pm is None or len(reads_v) != 1:
        return None
    body = inline_body(prod.op.body, cons.op.body, k)
    inputs = [x for n, x in enumerate(cons.inputs) if n != k] + list(prod.inputs)
    body, inputs = merge_params(body, inputs)
    body.reds = [dataclasses.replace(r, name=r.var.name) for r in body.reds]
    m = match_b2b(body, body.outs[0], list(body.index)[:2])
    tiles = m and _b2b_tiles(m, list(body.index)[:2], prod.op.tiles[pm.red.var.name],
                             *cons.outputs[0].shape)
    if not tiles:
        return None
    return pi, Node(TileOp(None, body=body, tiles=tiles), inputs, cons.outputs)


def _plain_gemm(node: Node):
    """The GemmMatch of a one-output node lowered as a gemm with plain-load operands in
    the (i, k) x (k, j) orientation, else None."""
    body = node.op.body
    if len(node.outputs) != 1 or len(body.sig.outputs[0].shape) != 2:
        return None
    gm = match_gemm(body, body.outs[0], list(body.index)[:2])
    if gm is None or gm.trans_a or gm.trans_b or not isinstance(gm.a, Load) or \
            not isinstance(gm.b, Load):
        return None
    return gm


def _b2b_tiles(m, names: list[str], bk1: int, rows: int, cols: int):
    """Tiles of the fused op, or None where its output columns do not fit one block. The
    tile sizes do not change the bits: a sum's fold starts from +0.0, so it is never
    -0.0, and the +0 products (0 * 0) a chunk past the end adds leave it as it is."""
    bm, _, bh, _ = schedule.b2b_tiles()
    bn = max(16, -(-cols // 16) * 16)
    budget = schedule.caches().l2 // 2
    acc, w2 = m.outer.out.dtype.np_dtype.itemsize, m.w2.buffer.dtype.np_dtype.itemsize

    def block_bytes(rows: int) -> int:  # the accumulator and one chunk of w2
        return bn * (rows * acc + bh * w2)

    while bm > 16 and block_bytes(bm) > budget:
        bm //= 2
    if block_bytes(bm) > budget:
        return None
    # taller blocks stream both weight matrices fewer times; keep 4 row blocks per core
    while bm < 256 and rows >= 8 * bm * (os.cpu_count() or 1) and \
            block_bytes(2 * bm) <= budget:
        bm *= 2
    return {names[0]: bm, names[1]: bn, m.outer.name: bh, m.inner.name: bk1}


PASSES = (fuse_epilogues, fuse_producers, fuse_back_to_back)
