"""Graph passes, each a function Graph -> Graph listed in order in PASSES. A pass builds its
new ops from the old ops' index expressions (fuse.py), so what it emits is ordinary tile IR
that either backend runs; tests compare the graph before and after, bit for bit.
"""

from __future__ import annotations

from tilepy.tileop.fuse import fuse_bodies, is_elementwise, loads_identity
from tilepy.tileop.graph import Graph, Node
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
            nodes[pi] = Node(op, prod.inputs + rest, cons.outputs)
            del nodes[ci]
            changed = True
            break
    return Graph(g.inputs, nodes, g.outputs)


def _user_tiles(op, body) -> dict:
    known = set(body.index) | {r.name for r in body.reds}
    return {k: v for k, v in op.tiles.items() if k in known}


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


PASSES = (fuse_epilogues,)
