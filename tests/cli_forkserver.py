"""A process that imports onnxfuse once, then runs each CLI command in a fresh fork of itself.

Each command still gets its own process (own address-space limit, own stdout/stderr file
descriptors, killed at its timeout), but skips the ~1.5 s of interpreter start and imports, so
the bad-input corpus runs a few hundred commands in seconds. Protocol: one JSON request per
stdin line ({"args", "cwd", "limit", "timeout"}), one JSON reply per stdout line
({"returncode", "stdout", "stderr", "seconds"}); returncode null means killed at the timeout.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import tempfile
import time

from onnxfuse.cli import main as cli_main


def _child(args, cwd, limit, out_fd, err_fd) -> None:
    try:
        os.chdir(cwd)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        if limit:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            code = cli_main(args)
        except SystemExit as e:  # argparse's usage errors
            code = e.code if isinstance(e.code, int) else 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(int(code or 0))
    except BaseException:  # noqa: BLE001 - whatever escaped main() is reported like Python would
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)


def _run(req: dict) -> dict:
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.monotonic()
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            _child(req["args"], req["cwd"], req.get("limit"), out.fileno(), err.fileno())
        deadline = start + req.get("timeout", 90)
        status = None
        while status is None:
            done, st = os.waitpid(pid, os.WNOHANG)
            if done:
                status = st
            elif time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                status = -1
            else:
                time.sleep(0.005)
        code = None if status == -1 else (os.waitstatus_to_exitcode(status))
        out.seek(0)
        err.seek(0)
        return {"returncode": code, "stdout": out.read().decode(errors="replace"),
                "stderr": err.read().decode(errors="replace"), "seconds": time.monotonic() - start}


def serve() -> None:
    for line in sys.stdin:
        reply = _run(json.loads(line))
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    serve()
