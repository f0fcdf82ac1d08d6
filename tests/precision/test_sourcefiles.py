"""precision/sourcefiles.py: generated modules are written once, with their bytecode."""

import importlib.util
import marshal
import os

from tilepy.precision.sourcefiles import write_once


def _code_in(pyc: str):
    with open(pyc, "rb") as f:
        return marshal.loads(f.read()[16:])  # after the 16-byte header


def test_write_once_leaves_bytecode_that_matches_the_source(tmp_path, monkeypatch):
    monkeypatch.setattr("sys.dont_write_bytecode", True)  # as PYTHONDONTWRITEBYTECODE=1
    path = tmp_path / "gen.py"
    write_once(path, "X = 1\n")
    pyc = importlib.util.cache_from_source(str(path))
    assert "X" in _code_in(pyc).co_names
    write_once(path, "Y = 2\n")  # a different (say corrupted) file is rewritten, bytecode too
    assert "Y" in _code_in(pyc).co_names and "X" not in _code_in(pyc).co_names
    spec = importlib.util.spec_from_file_location("gen_mod", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.Y == 2


def test_a_missing_pyc_is_written_again_for_an_unchanged_source(tmp_path):
    path = tmp_path / "gen.py"
    write_once(path, "Z = 3\n")
    pyc = importlib.util.cache_from_source(str(path))
    os.remove(pyc)
    write_once(path, "Z = 3\n")
    assert "Z" in _code_in(pyc).co_names
