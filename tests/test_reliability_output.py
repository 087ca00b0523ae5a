"""Nothing lost: interrupted and racing writes leave a whole old output or a whole new one (issue 7).

A child process saves a "biggish" model (tens of MB of external data, so the write takes a
while) over an existing output; the parent interrupts it (SIGINT, SIGKILL) at spread-out
moments, or starts a second writer on the same path. Each model's name says which value its
weights hold, so a model paired with another write's data file is caught.
"""

from __future__ import annotations

import os
import pathlib
import signal
import stat
import subprocess
import sys
import time

import numpy as np
import onnx
import pytest

from onnxfuse import atomic_write

MB = 1024**2
WEIGHT_MB = 32  # big enough that writing takes tens of milliseconds (fsync included)

SAVER = r"""
import sys, numpy as np, onnx_ir as ir
from onnxfuse.model_io import save_model
out, value, mb = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
if sys.argv[4:] == ["die-in-commit"]:  # the whole process group is killed once the rename helper has started
    import os, signal, subprocess
    def run_then_die(*args, **kwargs):
        subprocess.Popen(*args, **kwargs)
        os.killpg(0, signal.SIGKILL)
    subprocess.run = run_then_die
w = ir.Value(name="w", const_value=ir.tensor(np.full((mb, 262144), value, np.float32), name="w"))
x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([1, w.const_value.shape[0]]))
node = ir.node("MatMul", [x, w], outputs=[ir.Value(name="y", type=ir.TensorType(ir.DataType.FLOAT))])
graph = ir.Graph([x], node.outputs, nodes=[node], initializers=[w], opset_imports={"": 21}, name=f"v{value:g}")
print("saving", flush=True)
save_model(ir.Model(graph, ir_version=10), out, external_data=True)
print("saved", flush=True)
"""


def _start(out: pathlib.Path, value: float, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", SAVER, str(out), str(value), str(WEIGHT_MB), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _save(out: pathlib.Path, value: float) -> None:
    p = _start(out, value)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 0, err


def _whole_value(out: pathlib.Path) -> float:
    """The single value of the model at `out`, after checking its data file belongs to it."""
    model = onnx.load(out)  # reads the external data: a short or missing data file fails here
    w = onnx.numpy_helper.to_array(model.graph.initializer[0])
    assert w.size * 4 == WEIGHT_MB * MB, "the weight is not whole"
    named = float(model.graph.name[1:])
    lo, hi = float(w.min()), float(w.max())
    assert lo == hi == named, f"model '{model.graph.name}' paired with data holding {lo}..{hi}"
    return named


def _settled(folder: pathlib.Path):
    """Wait out a commit that a killed writer's rename helper may still be finishing."""
    return atomic_write.folder_lock(str(folder))


def _dead_pid() -> int:
    """The pid of a process that has exited (a killed writer's, for its leftover staging folder)."""
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def _leftovers(folder: pathlib.Path) -> list[str]:
    return [p.name for p in folder.iterdir() if atomic_write.STAGING_MARK in p.name]


@pytest.fixture(scope="module")
def previous(tmp_path_factory):
    folder = tmp_path_factory.mktemp("prev")
    _save(folder / "out.onnx", 1.0)
    return folder


def _fresh(tmp_path, previous) -> pathlib.Path:
    for name in ("out.onnx", "out.onnx.data"):
        (tmp_path / name).write_bytes((previous / name).read_bytes())
    return tmp_path / "out.onnx"


@pytest.mark.parametrize("delay", [0.0, 0.1, 0.3])
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
def test_interrupted_save_leaves_old_or_new_whole(tmp_path, previous, sig, delay):
    out = _fresh(tmp_path, previous)
    p = _start(out, 2.0)
    assert p.stdout.readline().strip() == "saving"
    time.sleep(delay)
    p.send_signal(sig)
    p.communicate(timeout=60)
    with _settled(tmp_path):
        assert _whole_value(out) in (1.0, 2.0)
    if sig == signal.SIGINT:
        assert _leftovers(tmp_path) == [], "KeyboardInterrupt must remove the staging folder"
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == ["out.onnx", "out.onnx.data"]
    _save(out, 3.0)  # the next write clears what a killed writer left
    assert _whole_value(out) == 3.0
    assert _leftovers(tmp_path) == []


def test_writer_killed_during_its_renames_still_leaves_the_new_pair(tmp_path, previous):
    out = _fresh(tmp_path, previous)
    p = _start(out, 2.0, "die-in-commit")
    p.communicate(timeout=60)
    assert p.returncode == -signal.SIGKILL
    with _settled(tmp_path):
        assert _whole_value(out) == 2.0


def test_racing_saves_leave_one_whole_result(tmp_path, previous):
    out = _fresh(tmp_path, previous)
    for round_ in range(2):
        writers = [_start(out, v) for v in (10.0 + round_, 20.0 + round_)]
        for w in writers:
            _, err = w.communicate(timeout=120)
            assert w.returncode == 0, err
        assert _whole_value(out) in (10.0 + round_, 20.0 + round_)
        assert _leftovers(tmp_path) == []


def test_outputs_get_ordinary_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        atomic_write.write_text(str(tmp_path / "report.json"), "{}")
    finally:
        os.umask(old)
    mode = stat.S_IMODE((tmp_path / "report.json").stat().st_mode)
    assert mode == 0o644, oct(mode)
    assert (tmp_path / "report.json").read_text() == "{}"
    assert _leftovers(tmp_path) == []


def test_stale_staging_of_a_dead_writer_is_removed_but_a_live_ones_is_kept(tmp_path):
    stale = tmp_path / f".r.json{atomic_write.STAGING_MARK}{_dead_pid()}.abc"
    live = tmp_path / f".r.json{atomic_write.STAGING_MARK}1.abc"  # pid 1 is always running
    stale.mkdir()
    live.mkdir()
    atomic_write.write_bytes(str(tmp_path / "r.json"), b"x")
    assert not stale.exists() and live.exists()


def test_failed_write_keeps_the_previous_pair(tmp_path, previous, monkeypatch):
    import onnx_ir as ir

    from onnxfuse.diagnostics import OnnxfuseError
    from onnxfuse.model_io import load_model, save_model

    out = _fresh(tmp_path, previous)
    model = load_model(str(previous / "out.onnx"))

    def full_disk(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic_write, "commit", full_disk)
    with pytest.raises(OnnxfuseError):
        save_model(model, str(out), external_data=True)
    assert _whole_value(out) == 1.0
    assert _leftovers(tmp_path) == []
    monkeypatch.undo()
    assert isinstance(model.graph.initializers["w"].const_value, ir.ExternalTensor)


# --- the same through `onnxfuse optimize` ------------------------------------------------------
def _int4_model(folder: pathlib.Path, k: int = 4096, n: int = 4096) -> pathlib.Path:
    """DQ(int4 [K, N], block 32) -> MatMul with external data: a few MB to repack and write."""
    import ml_dtypes
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.integers(-8, 8, size=(k, n)).astype(ml_dtypes.int4), "w")
    s = numpy_helper.from_array(rng.uniform(0.01, 0.1, size=(k // 32, n)).astype(np.float16), "w_scale")
    nodes = [helper.make_node("DequantizeLinear", ["w", "w_scale"], ["w_dq"], name="dq_w", axis=0, block_size=32),
             helper.make_node("Cast", ["w_dq"], ["w_f"], name="cast", to=TensorProto.FLOAT),
             helper.make_node("MatMul", ["a", "w_f"], ["y"], name="matmul")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])], initializer=[w, s])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    path = folder / "in.onnx"
    onnx.save(model, path, save_as_external_data=True, location="in.onnx.data", size_threshold=0)
    return path


def _optimize(src: pathlib.Path, out: pathlib.Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "onnxfuse", "optimize", str(src), "-o", str(out),
                             "--external-data", "yes"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _fused_whole(out: pathlib.Path) -> None:
    model = onnx.load(out)  # with its external data: a model paired with a partial data file fails
    onnx.checker.check_model(model, full_check=True)
    assert any(n.domain == "onnxfuse" for n in model.graph.node)


@pytest.fixture(scope="module")
def big_input(tmp_path_factory):
    folder = tmp_path_factory.mktemp("big")
    src = _int4_model(folder)
    p = _optimize(src, folder / "reference.onnx")
    _, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    start = time.monotonic()
    p = _optimize(src, folder / "timing.onnx")
    _wait_until_loading(p)
    startup = time.monotonic() - start
    p.communicate(timeout=300)
    return src, startup, time.monotonic() - start


def _wait_until_loading(p: subprocess.Popen, timeout: float = 120) -> None:
    """Until the child has memory-mapped the input's external data: past start-up, into the run.

    (A signal during start-up, while Python still imports, is another matter: see
    docs/reliability.md, "Known".)"""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and p.poll() is None:
        try:
            if "in.onnx.data" in pathlib.Path(f"/proc/{p.pid}/maps").read_text():
                return
        except OSError:
            return
        time.sleep(0.002)


@pytest.mark.parametrize("fraction", [0.1, 0.3, 0.5, 0.8])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_interrupted_optimize_leaves_no_partial_output(tmp_path, big_input, sig, fraction):
    """Signals spread over the run after start-up (loading, repacking, writing)."""
    src, startup, seconds = big_input
    digest = _digest(src)
    out = tmp_path / "out.onnx"
    p = _optimize(src, out)
    _wait_until_loading(p)
    time.sleep((seconds - startup) * fraction)
    p.send_signal(sig)
    _, err = p.communicate(timeout=120)
    print(f"signal {sig} at {fraction:.0%}: exit {p.returncode}, output {'written' if out.exists() else 'absent'}")
    assert "Traceback" not in err
    with _settled(tmp_path):
        if os.path.exists(out):
            _fused_whole(out)  # it finished before the signal: then it is whole
        else:
            assert not (tmp_path / "out.onnx.data").exists() or p.returncode == 0
    if sig == signal.SIGINT:
        # 130: onnxfuse caught it; -SIGINT: it landed before Python's own handler was installed.
        assert p.returncode in (0, 130, -signal.SIGINT), (p.returncode, err)
        assert _leftovers(tmp_path) == []
    assert _digest(src) == digest


def test_two_optimizes_racing_on_one_output(tmp_path, big_input):
    src, _, _ = big_input
    out = tmp_path / "out.onnx"
    racers = [_optimize(src, out), _optimize(src, out)]
    for r in racers:
        _, err = r.communicate(timeout=300)
        assert r.returncode == 0, err
    _fused_whole(out)
    assert _leftovers(tmp_path) == []


def _digest(path: pathlib.Path) -> str:
    import hashlib

    h = hashlib.sha256()
    for p in sorted(path.parent.glob(path.name + "*")):
        h.update(p.read_bytes())
    return h.hexdigest()


def _small_pair_model():
    import onnx_ir as ir

    w = ir.Value(name="w", const_value=ir.tensor(np.full((64, 64), 5.0, np.float32), name="w"))
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([1, 64]))
    node = ir.node("MatMul", [x, w], outputs=[ir.Value(name="y", type=ir.TensorType(ir.DataType.FLOAT))])
    graph = ir.Graph([x], node.outputs, nodes=[node], initializers=[w], opset_imports={"": 21}, name="v5")
    return ir.Model(graph, ir_version=10)


def test_a_rename_that_fails_is_reported(tmp_path, monkeypatch):
    from onnxfuse.diagnostics import OnnxfuseError
    from onnxfuse.model_io import save_model

    helpers = []
    real_run = subprocess.run
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: helpers.append(a) or real_run(*a, **k))
    (tmp_path / "out.onnx.data").mkdir()  # a file cannot be renamed onto a folder
    (tmp_path / "out.onnx.data" / "keep").write_text("x")
    with pytest.raises(OnnxfuseError, match="cannot write the model: .*out.onnx.data"):
        save_model(_small_pair_model(), str(tmp_path / "out.onnx"), external_data=True)
    assert len(helpers) == 1, "the pair is renamed by the helper"
    assert not (tmp_path / "out.onnx").exists()
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("executable", ["", "/bin/true", "/bin/false"])  # none known; not a Python
def test_pair_is_renamed_in_process_without_a_python_to_start(tmp_path, monkeypatch, executable):
    from onnxfuse.model_io import save_model

    monkeypatch.setattr(sys, "executable", executable)
    save_model(_small_pair_model(), str(tmp_path / "out.onnx"), external_data=True)
    assert (tmp_path / "out.onnx.data").is_file()
    model = onnx.load(tmp_path / "out.onnx")
    assert float(onnx.numpy_helper.to_array(model.graph.initializer[0]).min()) == 5.0
    assert _leftovers(tmp_path) == []


def test_dead_writers_staging_is_removed_only_under_the_folder_lock(tmp_path):
    """A killed writer's rename helper may still be renaming out of its staging folder while it holds
    the lock: the next writer waits for the lock before removing the folder."""
    import threading

    stale = tmp_path / f".r.json{atomic_write.STAGING_MARK}{_dead_pid()}.abc"
    stale.mkdir()
    with atomic_write.folder_lock(str(tmp_path)):
        cleaner = threading.Thread(target=atomic_write.remove_stale_staging, args=(str(tmp_path), "r.json"))
        cleaner.start()
        cleaner.join(0.3)
        assert stale.exists() and cleaner.is_alive()
    cleaner.join(10)
    assert not stale.exists()
