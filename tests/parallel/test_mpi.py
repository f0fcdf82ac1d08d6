"""The mpi backend under a real `mpiexec`: same bits as local, MPICH's order replayed, faults.

Every run has a subprocess time limit. mpi4py and the MPICH wheel come with the `[mpi]`
extra that `make test` installs: if they are missing these tests fail (they never skip).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import tilepy.parallel as tp
from tests.parallel import mpi_programs
from tests.parallel.helpers import launch

pytestmark = pytest.mark.mpi
PROGRAM = Path(mpi_programs.__file__)
ROOT = Path(__file__).resolve().parents[2]


def mpiexec() -> str:
    exe = Path(sys.executable).parent / "mpiexec"
    assert exe.exists(), f"{exe} is missing: install the [mpi] extra (mpi4py, mpich)"
    return str(exe)


def run_mpi(name: str, p: int, limit: float = 60.0, env: dict | None = None,
            options: tuple = ()):
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), "TILEPY_COMM_TIMEOUT": "20",
                "TILEPY_ABORT_GRACE": "0.3", **(env or {})}
    return subprocess.run([mpiexec(), *options, "-n", str(p), sys.executable, str(PROGRAM),
                           name], capture_output=True, text=True, timeout=limit, env=full_env)


def site(tag: str) -> str:
    """'<mpi_programs.py>:<line>' of the line of mpi_programs.py ending with `# tag`."""
    with open(PROGRAM) as f:
        n = next(i for i, text in enumerate(f, 1) if text.rstrip().endswith(f"# {tag}"))
    return f"{PROGRAM}:{n}"


def result(proc) -> list:
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert len(line) == 1, proc.stdout[-2000:]
    return json.loads(line[0][len("RESULT "):])


def test_mpi4py_is_installed():
    import mpi4py  # noqa: F401  (a failure here means the [mpi] extra is missing)

    mpiexec()


@pytest.mark.parametrize("p", [1, 2, 3, 4, 5, 7, 8])
def test_same_bits_as_local_for_every_algorithm(p):
    got = result(run_mpi("algorithms", p, limit=90))
    want = launch(mpi_programs.algorithms, p)
    assert got == want  # every rank, every algorithm, f32/f64/bf16
    assert all(r[k] == got[0][k] for r in got[1:] for k in r if not k.startswith("rs/"))


@pytest.mark.parametrize("p", [1, 3, 4])
def test_api_same_results_as_local(p):
    got = result(run_mpi("api", p))
    want = json.loads(json.dumps(launch(mpi_programs.api, p)))
    for g in got:  # one host: numa, host and network levels, enough places for the ranks
        assert g.pop("topology") == ["numa", "host", "network", True]
    for w in want:
        assert w.pop("topology") == ["numa", "host", True]
    assert got == want


def test_native_collectives():
    p = 3
    got = result(run_mpi("native", p))
    for r, res in enumerate(got):
        assert res["float32"] == [3.0 * i + 3 for i in range(6)]
        assert res["bfloat16"] == res["float32"] == res["float64"]
        assert res["float32_max"] == [i + 2.0 for i in range(6)]
        assert res["rs"] == [3 * i for i in range(7)][[0, 3, 5][r]:[3, 5, 7][r]]
        assert res["ag"] == [0, 1, 1, 2, 2, 2] and res["bc"] == [0.0, 1.0, 2.0]
        assert res["a2a"] == [10 * j + r for j in range(p)]
        assert res["red"] == ([6] if r == 0 else None)


REPLAYS = [  # (MPICH algorithm forced by the CVAR or "" for its default, tilepy's replay, p)
    ("", "recursive_doubling", 4),
    ("ring", "mpich_ring", 2), ("ring", "mpich_ring", 3), ("ring", "mpich_ring", 4),
    ("recursive_doubling", "recursive_doubling", 3),
    ("recursive_doubling", "recursive_doubling", 5),
    ("reduce_scatter_allgather", "rabenseifner", 4),
    ("reduce_scatter_allgather", "rabenseifner", 5),
]


@pytest.mark.parametrize("cvar,replay,p", REPLAYS)
def test_replay_of_mpich_order_bit_for_bit(cvar, replay, p):
    env = {"TILEPY_REPLAY_AS": replay}
    if cvar:
        env["MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM"] = cvar
    got = result(run_mpi("replay", p, env=env))
    for case, (native, ours) in got[0].items():
        assert native == ours, (case, cvar, p)


def test_replay_can_fail():
    # at p = 4 MPICH's ring differs from its default order on this data
    env = {"TILEPY_REPLAY_AS": "recursive_doubling",
           "MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM": "ring"}
    got = result(run_mpi("replay", 4, env=env))
    assert any(native != ours for native, ours in got[0].values())


@pytest.mark.parametrize("name,needle", [
    ("mismatch", "CollectiveMismatchError"),
    ("crash", "rank two crashed"),
])
def test_faults_fail_the_job_quickly(name, needle):
    proc = run_mpi(name, 3, limit=30)
    assert proc.returncode != 0
    assert needle in proc.stderr


def test_collective_order_mismatch_in_debug_mode_reported_by_every_rank():
    proc = run_mpi("order", 2, limit=30, env={"TILEPY_COMM_DEBUG": "1",
                                             "TILEPY_ABORT_GRACE": "1.0"})
    assert proc.returncode != 0
    assert "rank 0 of 2 failed" in proc.stderr and "rank 1 of 2 failed" in proc.stderr
    assert proc.stderr.count("rank 0: #1 bcast(root=0, algorithm=tree); "
                             "rank 1: #1 allreduce(float64[3]") == 2


@pytest.mark.parametrize("alg", ["ring", "native"])
def test_straggler_gives_timeout_naming_it_not_hang(alg):
    env = {"TILEPY_COMM_TIMEOUT": "1", "TILEPY_STRAGGLER_ALG": alg}
    proc = run_mpi("straggler", 3, limit=30, env=env)
    assert proc.returncode != 0
    err = proc.stderr
    assert "CommTimeoutError: " + site("waits for the straggler") + ": rank 1 did not reach " \
           "comm.allreduce (collective #1 on the world communicator) within 1 s: ranks 0 " \
           "and 2 wait there for it. rank 1 is computing at " + site("straggles") + \
           " (in straggler)" in err
    assert "TILEPY_COMM_TIMEOUT=SECONDS" in err


def test_a_rank_that_returns_early_is_named_with_the_call_it_skipped():
    proc = run_mpi("early", 3, limit=30)
    assert proc.returncode != 0
    err = proc.stderr
    assert "RankExitedError: " + site("skipped by rank 0") + ": rank 0 returned from its " \
           "function without making comm.allreduce (collective #1 on the world " \
           "communicator), where rank" in err
    assert "allgatherv" not in err and "CommTimeoutError" not in err


def test_the_end_of_launch_waits_at_most_the_timeout():
    proc = run_mpi("late", 3, limit=30, env={"TILEPY_COMM_TIMEOUT": "1"})
    assert proc.returncode != 0
    assert "CommTimeoutError: " + site("returns late") + ": rank 1 did not return within " \
           "1 s after ranks 0 and 2 returned. rank 1 is computing at" in proc.stderr


def test_a_dead_rank_is_named_when_mpiexec_lets_the_others_live():
    # By default MPICH's mpiexec kills every rank at once when one ends without
    # MPI_Finalize (no rank can print); -disable-auto-cleanup keeps the others running.
    proc = run_mpi("died", 3, limit=30, options=("-disable-auto-cleanup",))
    assert proc.returncode != 0
    assert "rank 1's process (pid " in proc.stderr
    assert "ended without a message (os._exit, a signal, or a crash in native code), while " \
           "rank 0 waits in comm.allreduce (collective #1 on the world communicator)" \
           in proc.stderr
    assert "CommTimeoutError" not in proc.stderr


def test_local_backend_rejects_native():
    with pytest.raises(tp.CommArgumentError, match="mpi backend"):
        launch(lambda c: c.allreduce([1.0], algorithm="native"), 2)
