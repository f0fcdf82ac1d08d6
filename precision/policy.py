"""Mixed-precision policies: which storage / compute / accumulate format each layer or op
class uses, and an autocast-style context (`current_policy`) for training code to read.

Only chooses formats (names from the format table); converts no values. A layer-name rule
(fnmatch pattern, most specific wins) beats an op-class rule, which beats the default.
"""

from __future__ import annotations

import contextlib
import contextvars
import fnmatch
from dataclasses import dataclass, field

from tilepy.precision.formats import get_format


@dataclass(frozen=True)
class Policy:
    """Formats of one layer / op: stored tensors, arithmetic, and gemm/reduction sums."""

    storage: str = "float32"
    compute: str = "float32"
    accumulate: str = "float32"

    def __post_init__(self):
        for attr in ("storage", "compute", "accumulate"):
            object.__setattr__(self, attr, get_format(getattr(self, attr)).name)


PRESETS = {
    "fp32": Policy(),
    "bf16": Policy("bfloat16", "bfloat16", "float32"),
    "fp16": Policy("float16", "float16", "float32"),
    "fp8": Policy("float8_e4m3fn", "bfloat16", "float32"),
}
# op classes that autocast keeps in float32 whatever the default (as torch.autocast does)
FP32_OPS = ("softmax", "norm", "loss", "exp", "log", "reduce")


@dataclass(frozen=True)
class PolicyTable:
    """A default policy plus rules keyed by op class ("matmul", "softmax", ...) or by
    layer-name pattern ("encoder.*.attn")."""

    default: Policy = Policy()
    ops: dict[str, Policy] = field(default_factory=dict)
    layers: dict[str, Policy] = field(default_factory=dict)

    @classmethod
    def preset(cls, name: str, keep_fp32: tuple[str, ...] = FP32_OPS) -> PolicyTable:
        """A preset default ("fp32", "bf16", "fp16", "fp8") with `keep_fp32` op classes
        kept in float32."""
        if name not in PRESETS:
            raise ValueError(f"unknown policy preset {name!r}; known: {', '.join(PRESETS)}")
        return cls(PRESETS[name], {op: PRESETS["fp32"] for op in keep_fp32})

    def lookup(self, op: str | None = None, layer: str | None = None) -> Policy:
        """The policy for an op class inside a layer (both optional)."""
        if layer is not None:
            hits = [p for p in self.layers if fnmatch.fnmatchcase(layer, p)]
            if hits:
                return self.layers[max(hits, key=_specificity)]
        if op is not None and op in self.ops:
            return self.ops[op]
        return self.default


def _specificity(pattern: str) -> tuple[int, int]:
    return (len(pattern) - pattern.count("*") - pattern.count("?"), len(pattern))


_CURRENT: contextvars.ContextVar[PolicyTable | None] = contextvars.ContextVar(
    "tilepy_autocast", default=None
)


@contextlib.contextmanager
def autocast(policy: PolicyTable | Policy | str = "bf16", enabled: bool = True):
    """Within the block, `current_policy` answers from `policy` (a table, a single policy
    or a preset name). Nests; `enabled=False` restores plain float32."""
    if isinstance(policy, str):
        table = PolicyTable.preset(policy)
    elif isinstance(policy, Policy):
        table = PolicyTable(policy)
    else:
        table = policy
    token = _CURRENT.set(table if enabled else PolicyTable())
    try:
        yield table
    finally:
        _CURRENT.reset(token)


def current_policy(op: str | None = None, layer: str | None = None) -> Policy:
    """The policy in force for this op class / layer (float32 outside any autocast)."""
    table = _CURRENT.get()
    return Policy() if table is None else table.lookup(op, layer)
