"""Run `python -m onnxfuse ...` in a child process with bounded time and address space.

Shared by the reliability tests: a child that hangs is killed at `timeout`, one that tries to
allocate what a file merely claims hits RLIMIT_AS (set by util-linux `prlimit`, or by a tiny
launcher when that is missing; never preexec_fn, which is unsafe with the test's threads).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import time

# Enough for Python + numpy + onnx + onnx-ir + a small model (about 0.2 GB mapped), far below
# what any bomb of the corpus claims (terabytes).
ADDRESS_SPACE_LIMIT = 2 * 1024**3
TIMEOUT_S = 90

_LAUNCHER = (
    "import resource, runpy, sys; lim = int(sys.argv.pop(1)); "
    "resource.setrlimit(resource.RLIMIT_AS, (lim, lim)); sys.argv[0] = 'onnxfuse'; "
    "runpy.run_module('onnxfuse', run_name='__main__', alter_sys=True)"
)


@dataclasses.dataclass
class Result:
    args: list[str]
    returncode: int | None  # None: killed at the timeout
    stdout: str
    stderr: str
    seconds: float

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def command(args: list[str], limit: int | None = ADDRESS_SPACE_LIMIT) -> list[str]:
    if limit is None:
        return [sys.executable, "-m", "onnxfuse", *args]
    if shutil.which("prlimit"):
        return ["prlimit", f"--as={limit}", "--", sys.executable, "-m", "onnxfuse", *args]
    return [sys.executable, "-c", _LAUNCHER, str(limit), *args]


def run(args: list[str], *, cwd: str | None = None, limit: int | None = ADDRESS_SPACE_LIMIT,
        timeout: float = TIMEOUT_S, env: dict | None = None) -> Result:
    start = time.monotonic()
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    try:
        p = subprocess.run(command(args, limit), cwd=cwd, capture_output=True, text=True, timeout=timeout,
                           env=full_env, stdin=subprocess.DEVNULL)
        return Result(args, p.returncode, p.stdout, p.stderr, time.monotonic() - start)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        return Result(args, None, out, err, time.monotonic() - start)


class ForkServer:
    """Runs CLI commands through tests/cli_forkserver.py: a process per command, imports done once."""

    def __init__(self):
        import pathlib

        root = pathlib.Path(__file__).resolve().parents[1]
        self._proc = subprocess.Popen([sys.executable, "-m", "tests.cli_forkserver"], cwd=root, stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})

    def run(self, args: list[str], *, cwd: str, limit: int | None = ADDRESS_SPACE_LIMIT,
            timeout: float = TIMEOUT_S) -> Result:
        import json

        self._proc.stdin.write(json.dumps({"args": args, "cwd": cwd, "limit": limit, "timeout": timeout}) + "\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError("the fork server died")
        r = json.loads(line)
        return Result(args, r["returncode"], r["stdout"], r["stderr"], r["seconds"])

    def close(self) -> None:
        self._proc.stdin.close()
        self._proc.wait(timeout=30)
