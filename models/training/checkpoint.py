"""Saving and loading state without pickle: `save(state, path)` / `load(path)` for nested
dicts, lists, numbers, strings and numpy / ml_dtypes arrays, in a .npz file.

Arrays are the zip's members (low-precision ones as unsigned-integer views); the tree,
the dtypes and a SHA-256 of every array are one JSON member. Files are written to a
temporary name and renamed (os.replace), so a crash never leaves a partial checkpoint
under the final name; a corrupt, truncated or foreign file is a CheckpointError.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import zipfile

import numpy as np

from tilepy.models.training.errors import CheckpointError, user_loc

FORMAT = "tilepy-checkpoint"
VERSION = 1
TREE = "__tilepy_tree__"


def _storable(a: np.ndarray) -> np.ndarray:
    """`a` as an array numpy saves without pickle (ml_dtypes arrays as their bits)."""
    a = np.ascontiguousarray(a)
    if a.dtype.kind == "V" or a.dtype.type.__module__.startswith("ml_dtypes"):
        return a.view(f"u{a.dtype.itemsize}")
    if a.dtype.hasobject:
        raise CheckpointError("cannot save an array of Python objects without pickle",
                              user_loc(), hint="convert it to a numeric array")
    return a


def _encode(obj, arrays: dict):
    if isinstance(obj, dict):
        return {"dict": [[_key(k), _encode(v, arrays)] for k, v in obj.items()]}
    if isinstance(obj, (list, tuple)):
        return {type(obj).__name__ if type(obj) in (list, tuple) else "list":
                [_encode(v, arrays) for v in obj]}
    if isinstance(obj, (np.ndarray, np.generic)):
        a = np.asarray(obj)
        name = f"a{len(arrays)}"
        stored = _storable(a)
        arrays[name] = stored
        return {"array": name, "dtype": str(a.dtype), "shape": list(a.shape),
                "scalar": isinstance(obj, np.generic),
                "sha256": hashlib.sha256(stored.tobytes()).hexdigest()}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return {"value": obj}
    raise CheckpointError(f"cannot save a {type(obj).__name__} in a checkpoint", user_loc(),
                          hint="state may hold dicts, lists, numbers, strings and arrays")


def _key(k):
    if isinstance(k, bool) or not isinstance(k, (str, int)):
        raise CheckpointError(f"checkpoint dict keys must be str or int; got {k!r}", user_loc())
    return [type(k).__name__, k]


def save(state, path) -> None:
    """Write `state` (a nested dict of arrays, numbers and strings) to `path` atomically."""
    arrays: dict[str, np.ndarray] = {}
    tree = {"format": FORMAT, "version": VERSION, "root": _encode(state, arrays)}
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".npz", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            blob = np.frombuffer(json.dumps(tree).encode(), np.uint8)
            np.savez(f, **{TREE: blob}, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def load(path):
    """The state saved by save(); a CheckpointError if the file is not a whole checkpoint."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise CheckpointError(f"no checkpoint at {path}", user_loc())
    try:
        with np.load(path, allow_pickle=False) as z:
            tree = json.loads(bytes(z[TREE]).decode())
            if tree.get("format") != FORMAT:
                raise ValueError("not a tilepy checkpoint")
            if tree.get("version") != VERSION:
                raise ValueError(f"format version {tree.get('version')}, expected {VERSION}")
            return _decode(tree["root"], z)
    except CheckpointError:
        raise
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile,
            json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path} is not a readable tilepy checkpoint (corrupt, "
                              f"truncated or another format): {e}", user_loc(),
                              hint="use the last complete checkpoint; save() never leaves "
                                   "a partial file under the final name") from None


def _decode(node, z):
    if "dict" in node:
        return {(int(k) if t == "int" else k): _decode(v, z) for (t, k), v in node["dict"]}
    if "list" in node:
        return [_decode(v, z) for v in node["list"]]
    if "tuple" in node:
        return tuple(_decode(v, z) for v in node["tuple"])
    if "array" in node:
        stored = z[node["array"]]
        if hashlib.sha256(np.ascontiguousarray(stored).tobytes()).hexdigest() != node["sha256"]:
            raise ValueError(f"array {node['array']} does not match its checksum")
        a = _restore_dtype(stored, node["dtype"]).reshape(node["shape"])
        return a[()] if node.get("scalar") else a
    return node["value"]


def _restore_dtype(stored: np.ndarray, name: str) -> np.ndarray:
    if stored.dtype.name == name:
        return stored
    import ml_dtypes  # a core dependency; low-precision arrays were saved as their bits

    return stored.view(np.dtype(getattr(ml_dtypes, name)))
