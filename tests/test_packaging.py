"""passes/ and kernels/ install as onnxfuse.passes and onnxfuse.kernels, never top level."""

import os
import pathlib
import subprocess
import sys
import sysconfig
import tomllib
import venv
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _listed_packages():
    return set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])


def test_every_package_folder_is_listed():
    mapping = {"passes": "onnxfuse.passes", "kernels": "onnxfuse.kernels"}
    found = set()
    for init in ROOT.glob("**/__init__.py"):
        rel = init.parent.relative_to(ROOT)
        if rel.parts[0] not in ("onnxfuse", "passes", "kernels"):
            continue
        parts = list(rel.parts)
        parts[0] = mapping.get(parts[0], parts[0])
        found.add(".".join(parts))
    assert found == _listed_packages()


def test_editable_install_maps_subpackages():
    code = "import onnxfuse.passes, onnxfuse.kernels; print(onnxfuse.passes.__file__); print(onnxfuse.kernels.__file__)"
    out = subprocess.run([sys.executable, "-c", code], cwd="/", capture_output=True, text=True, check=True).stdout.split()
    assert pathlib.Path(out[0]) == ROOT / "passes" / "__init__.py"
    assert pathlib.Path(out[1]) == ROOT / "kernels" / "__init__.py"
    for top in ("passes", "kernels"):
        r = subprocess.run([sys.executable, "-c", f"import {top}"], cwd="/", capture_output=True, text=True)
        assert r.returncode != 0 and "ModuleNotFoundError" in r.stderr


@pytest.mark.slow
def test_wheel_installs_subpackages_in_a_fresh_venv(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path / "dist"), str(ROOT)],
        check=True,
    )
    (wheel,) = (tmp_path / "dist").glob("onnxfuse-*.whl")
    tops = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert "passes" not in tops and "kernels" not in tops
    assert "onnxfuse" in tops

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    fresh_python = env_dir / "bin" / "python"
    fresh_site = subprocess.run(
        [str(fresh_python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    # Install the wheel by unpacking it (what pip does for a pure wheel), so the test needs no index.
    zipfile.ZipFile(wheel).extractall(fresh_site)
    # Dependencies (onnx, onnx-ir, ...) come from this environment; PYTHONPATH does not run its
    # .pth files, so the editable install of the repository is not visible there.
    env = dict(os.environ, PYTHONPATH=sysconfig.get_paths()["purelib"])
    code = (
        "import onnxfuse, onnxfuse.passes, onnxfuse.kernels, importlib.util;"
        "print(onnxfuse.__file__);"
        "print(importlib.util.find_spec('passes'), importlib.util.find_spec('kernels'))"
    )
    out = subprocess.run([str(fresh_python), "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, check=True).stdout
    first, second = out.splitlines()
    assert first.startswith(fresh_site)
    assert second == "None None"
