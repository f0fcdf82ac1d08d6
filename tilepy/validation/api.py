"""`validate(output, op, inputs, **config)`: the entry point, and `load_case` for .npz files.

Owns resolving the op (a name, or a tilepy kernel used as the reference), binding the
inputs to their roles, decoding bit-pattern arrays, and running the two tiers into a
`Report`. The numbers are derived in ops.py/rowops.py, bounds.py and stats.py.
"""

from __future__ import annotations

import json

import numpy as np

from tilepy.boundary import api_boundary
from tilepy.precision.formats import get_format
from tilepy.validation import rowops  # noqa: F401 - registers the row-wise ops
from tilepy.validation import stats as stats_mod
from tilepy.validation.errors import ConfigError
from tilepy.validation.models import parse
from tilepy.validation.ops import OPS, Prepared, f64, grid
from tilepy.validation.report import Report

ALIASES = {"matmul": "gemm", "mm": "gemm", "scaled_mm": "scaled_gemm", "sdpa": "attention",
           "flash_attention": "attention", "cross-entropy": "cross_entropy",
           "conv": "conv2d", "conv2d_nhwc": "conv2d", "layer_norm": "layernorm",
           "rms_norm": "rmsnorm"}
DEPTH_ROLE = {"gemm": ("a", -1), "scaled_gemm": ("a", -1), "attention": ("k", -2)}


@api_boundary
def prepare(op, inputs, output_dtype, **config):
    """A function output -> Report for many outputs of one op on the same inputs (the
    reference, bounds and model simulations are computed once)."""
    tile = tuple(config.pop("tile", None) or (16, 16))
    name = ALIASES.get(op, op)
    if name not in OPS:
        raise ConfigError(f"unknown op {op!r}", f"known ops: {', '.join(sorted(OPS))}")
    spec = OPS[name]
    inp = _bind(spec, inputs, config)
    config["output"] = get_format(output_dtype).name
    num = parse(config, spec.defaults(inp))
    prep = spec.prepare(inp, num)
    depth = _depth(name, inp)
    return lambda output: _check(name, num, _output(output, config["output"])[0], prep, tile,
                                 depth)


@api_boundary
def validate(output, op, inputs, **config) -> Report:
    """Check a backend's `output` of `op` on `inputs` against tilepy's derived bounds.

    op: a name (gemm, scaled_gemm, softmax, layernorm, rmsnorm, attention, conv2d,
    cross_entropy) or a tilepy kernel used as the reference. inputs: a dict of role ->
    array, or a sequence in role order. config: the backend's numerics (models.Numerics:
    inputs, compute, output, accumulate, mantissa_bits, promote_every, intermediate, eps,
    rounding) and the op's parameters (causal, scale, stride, padding, ...); `tile=(bm, bn)`
    names the tiles of the worst elements. Returns a `Report`.
    """
    tile = tuple(config.pop("tile", None) or (16, 16))
    if not isinstance(op, str):
        return _validate_kernel(output, op, inputs, tile, config)
    name, num, out, prep, depth = _prepare(output, op, inputs, config)
    return _check(name, num, out, prep, tile, depth)


def _prepare(output, op, inputs, config):
    name = ALIASES.get(op, op)
    if name not in OPS:
        raise ConfigError(f"unknown op {op!r}", f"known ops: {', '.join(sorted(OPS))}, or "
                          "a tilepy kernel as the reference")
    spec = OPS[name]
    inp = _bind(spec, inputs, config)
    out, out_dtype = _output(output, config.get("output"))
    config["output"] = out_dtype
    num = parse(config, spec.defaults(inp))
    return name, num, out, spec.prepare(inp, num), _depth(name, inp)


def _check(name, num, out, prep: Prepared, tile, depth) -> Report:
    if out.shape != prep.exact.shape:
        raise ConfigError(f"the output of {name} has shape {out.shape}, expected "
                          f"{prep.exact.shape} from the inputs",
                          "check the op's options (layout, stride, padding, transposes)")
    with np.errstate(invalid="ignore"):
        err = out - prep.exact
        abs_err = np.abs(err)
    bound = prep.refine(abs_err, prep.bound) if prep.refine else prep.bound
    v = prep.view
    inf = int(np.count_nonzero(np.isinf(bound)))
    if inf and not any("no finite bound" in n for n in prep.notes):
        prep.notes.append(f"{inf} elements have no finite bound: the config allows "
                          "algorithms whose error can be unbounded on these inputs "
                          "(layernorm: pass variance='two_pass' if the backend centres)")
    st = stats_mod.run(out.reshape(v), prep.exact.reshape(v), bound.reshape(v), prep,
                       num.output, tile, depth, err.reshape(v), num.rounding == "nearest")
    return Report(name, num, out, prep.exact, bound, st, tile, prep.notes, err, abs_err)


def _depth(name, inp) -> int:
    role, axis = DEPTH_ROLE.get(name, (None, -1))
    return int(np.shape(inp[role])[axis]) if role else 1


def _bind(spec, inputs, config) -> dict:
    roles = spec.roles + spec.optional
    if isinstance(inputs, dict):
        extra = sorted(set(inputs) - set(roles))
        if extra:
            raise ConfigError(f"{spec.name} takes no input named {', '.join(extra)}",
                              f"its inputs: {', '.join(roles)}")
        inp = dict(inputs)
    else:
        seq = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        if len(seq) > len(roles):
            raise ConfigError(f"{spec.name} takes at most {len(roles)} inputs "
                              f"({', '.join(roles)}), got {len(seq)}",
                              "pass a dict of role -> array to name them")
        inp = dict(zip(roles, seq))
    missing = [r for r in spec.roles if inp.get(r) is None]
    if missing:
        raise ConfigError(f"{spec.name} needs input(s) {', '.join(missing)}",
                          f"its inputs: {', '.join(roles)} (optional: "
                          f"{', '.join(spec.optional) or 'none'})")
    dts = dict(config.get("inputs") or {})
    return {k: _decode(v, dts.get(k), k) for k, v in inp.items() if v is not None}


def _decode(x, dtype, what):
    """An array in its real format: bit patterns (uint8/uint16) viewed as `dtype`."""
    a = np.asarray(x)
    if dtype is None:
        return a
    f = get_format(dtype)
    if a.dtype.kind in "ui" and a.dtype.itemsize * 8 == f.bits and f.kind == "float":
        return a.view(f.np_dtype)
    return a


def _output(output, dtype) -> tuple[np.ndarray, str]:
    a = _decode(output, dtype, "output")
    if a.dtype.kind not in "f" and not (a.dtype.kind == "V" or "float" in str(a.dtype)):
        raise ConfigError(f"the output is {a.dtype}, not a float array",
                          "for bit patterns pass output='bfloat16' (or the real format)")
    name = get_format(a.dtype).name
    return (a if a.dtype == np.float32 else f64(a)), name


# ---------------------------------------------------------------- kernels as references

KERNEL_OPS = {"gemm": "gemm", "softmax": "softmax", "layernorm": "layernorm",
              "rmsnorm": "rmsnorm", "flash_attention": "attention", "attention": "attention",
              "conv2d_nhwc": "conv2d"}


def _validate_kernel(output, kernel, inputs, tile, config) -> Report:
    """A tilepy kernel as the reference: its interpreter output is a candidate model; the
    bound is the named library op's when the kernel is one, else atol + rtol * |ref|."""
    from tilepy.backend import backend

    name = getattr(kernel, "name", None)
    if not callable(kernel) or name is None:
        raise ConfigError(f"op must be an op name or a tilepy kernel, got "
                          f"{type(kernel).__name__}", "build the kernel first: kernel(...)")
    seq = list(inputs.values()) if isinstance(inputs, dict) else list(inputs)
    with backend("interp"):
        ref = f64(kernel(*seq))
    if name in KERNEL_OPS and "atol" not in config:
        if name == "conv2d_nhwc":
            config.setdefault("layout", "NHWC")
            config.setdefault("weight_layout", "HWIO")
        op, num, out, prep, depth = _prepare(output, KERNEL_OPS[name], seq, config)
        if ref.shape == prep.exact.shape:  # the kernel's own numerics, as a candidate
            r2 = ref.reshape(prep.view)
            prep.candidates[f"kernel {name}"] = grid(lambda: (r2, r2))
        rep = _check(op, num, out, prep, tile, depth)
        rep.notes.append(f"reference kernel {name}: max |kernel - exact| / bound "
                         f"{_max_ratio(ref, rep):.3g}")
        return rep
    return _with_tolerance(output, name, ref, tile, config)


def _with_tolerance(output, name, ref, tile, config) -> Report:
    """A kernel that is not a library op: the sound tier is atol + rtol |ref| as given."""
    out, out_dtype = _output(output, config.get("output"))
    atol, rtol = float(config.pop("atol", 0.0)), float(config.pop("rtol", 0.0))
    if atol == 0 and rtol == 0:
        raise ConfigError(f"no bound is derived for the kernel {name!r}",
                          "pass atol= and/or rtol= for its sound tier, or validate "
                          "by op name (gemm, softmax, ...)")
    config["output"] = out_dtype
    num = parse(config, {})
    view = (ref.size // ref.shape[-1], ref.shape[-1]) if ref.ndim else (1, 1)
    r2 = ref.reshape(view)
    prep = Prepared(ref, atol + rtol * np.abs(ref), view,
                    {f"kernel {name}": grid(lambda: (r2, r2))}, f"kernel {name}",
                    ["sound tier: the given atol/rtol, not a derived bound"])
    return _check(name, num, out, prep, tile, 1)


def _max_ratio(ref, rep) -> float:
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.abs(ref.reshape(rep.exact.shape) - rep.exact) / rep.bound
    return float(np.nanmax(r)) if r.size else 0.0


# ---------------------------------------------------------------- files


META_KEYS = {"accumulate", "causal", "scale", "stride", "padding", "dilation", "groups",
             "layout", "weight_layout", "eps", "reduction", "dim", "compute",
             "mantissa_bits", "promote_every", "ignore_index"}


def load_case(path: str) -> tuple:
    """(output, op, inputs, config) from an .npz holding `out`, the inputs under their role
    names and optionally `meta` (a JSON string: op, dtypes of bit-pattern arrays, config),
    as tests/data/gpu/capture.py writes them."""
    with np.load(path, allow_pickle=False) as z:
        data = {k: z[k] for k in z.files}
    meta = json.loads(str(data.pop("meta"))) if "meta" in data else {}
    dts = meta.get("dtypes", {})
    arrays = {k: _decode(v, dts.get(k), k) if dts.get(k) not in (None, "int64", "int32")
              else v for k, v in data.items()}
    out = arrays.pop("out")
    config = {k: v for k, v in meta.get("config", {}).items() if k in META_KEYS}
    return out, meta.get("op"), arrays, config
