"""Atomic writes: whatever happens, an output path holds a whole old file or a whole new one.

Files are written into a private staging folder next to the destination (same filesystem, so
the final step is a rename), synced, and renamed into place. A model with external data is two
files; both are renamed under an exclusive lock on the destination folder, data first, so two
writers racing on one path leave one writer's pair, never a mix. The two renames are done by a
short-lived helper process in a session of its own, holding the lock: a writer killed (SIGKILL
included, or its whole process group) once they have started cannot leave the new data beside
the old model; SIGINT, SIGTERM and SIGHUP are held (ignored by the helper) until they are done.
Only a power cut or a SIGKILL of every process (a container's or cgroup's) between them can. A
writer killed with SIGKILL can leave only its hidden staging folder (`.NAME.onnxfuse-tmp.PID.*`);
the next write to the same name removes the folders of writers that are no longer running.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from typing import Iterator

STAGING_MARK = ".onnxfuse-tmp."


def _staging_prefix(name: str) -> str:
    return f".{name}{STAGING_MARK}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def remove_stale_staging(folder: str, name: str) -> None:
    """Remove staging folders for `name` left by writers that were killed. Under the folder lock: a
    killed writer's rename helper may still be moving files out of its folder."""
    prefix = _staging_prefix(name)
    try:
        entries = os.listdir(folder)
    except OSError:
        return
    stale = [e for e in entries if e.startswith(prefix) and _dead_writers_folder(e[len(prefix):])]
    if not stale:
        return
    with folder_lock(folder):
        for entry in stale:
            shutil.rmtree(os.path.join(folder, entry), ignore_errors=True)


def _dead_writers_folder(suffix: str) -> bool:
    pid_text = suffix.split(".", 1)[0]
    return pid_text.isdigit() and int(pid_text) != os.getpid() and not _pid_alive(int(pid_text))


@contextlib.contextmanager
def staging_folder(destination: str) -> Iterator[str]:
    """A private folder beside `destination`, removed on exit whether or not the write succeeded."""
    folder = os.path.dirname(os.path.abspath(destination))
    name = os.path.basename(destination)
    remove_stale_staging(folder, name)
    stage = None
    try:
        # Ctrl-C inside mkdtemp, after its mkdir and before `stage` is bound, would leak the folder
        with _signals_deferred():
            stage = tempfile.mkdtemp(prefix=f"{_staging_prefix(name)}{os.getpid()}.", dir=folder)
        yield stage
    finally:
        if stage is not None:
            shutil.rmtree(stage, ignore_errors=True)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _sync_file(path: str, mode: int) -> None:
    os.chmod(path, mode)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def folder_lock(folder: str) -> Iterator[int]:
    """The exclusive lock writers hold on `folder` while they rename; taking it waits out a commit."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)  # closing releases the lock


def commit(pairs: list[tuple[str, str]]) -> None:
    """Rename each staged file onto its destination, in order, under the destination folder's lock.

    Put the file that names the others last (the model after its external data): a reader
    that finds the new model then also finds its data.
    """
    mode = 0o666 & ~_umask()  # mkstemp creates 0600 files; outputs get the usual permissions
    for staged, _ in pairs:
        _sync_file(staged, mode)
    folders = {os.path.dirname(os.path.abspath(dest)) for _, dest in pairs}
    assert len(folders) == 1, "commit() renames within one folder"
    (folder,) = folders
    with folder_lock(folder) as fd, _signals_deferred():
        if len(pairs) > 1 and _helper_can_run():
            _replace_in_helper(pairs, fd)
        for staged, dest in pairs:  # all of them without a helper; else what it did not rename
            if os.path.lexists(staged):
                os.replace(staged, dest)
        os.fsync(fd)


def _helper_can_run() -> bool:
    """Whether sys.executable is a Python to start the helper with: not an embedding interpreter that
    does not know it, nor a frozen application (whose executable is the application)."""
    return bool(sys.executable) and not getattr(sys, "frozen", False)


# argv: staged destination staged destination ...; a failure leaves the rest staged for the caller
_RENAMER = """import os, signal, sys
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # held by the writer too; only SIGKILL remains
    signal.signal(s, signal.SIG_IGN)
a = sys.argv[1:]
for staged, dest in zip(a[::2], a[1::2]):
    os.replace(staged, dest)
"""


def _replace_in_helper(pairs: list[tuple[str, str]], lock_fd: int) -> None:
    """Do renames that must not be cut in two in a helper process (its own session, so a SIGKILL of
    this process or of its group does not reach it), which shares the folder lock until it exits.
    Whatever it did not rename (a failed rename, a sys.executable that is not a Python after all)
    stays staged, and the caller renames it in process: a real failure then raises its own OSError."""
    subprocess.run([sys.executable, "-I", "-S", "-c", _RENAMER, *(p for pair in pairs for p in pair)],
                   pass_fds=(lock_fd,), start_new_session=True,
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


_DEFERRED = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Hold Ctrl-C and kill's default signal over a step that must not be cut in two (the renames of
    one pair and the wait for them, the creation of a staging folder); only SIGKILL remains.

    A recording handler, not a blocked signal mask: a signal that arrived just before the step is
    already pending in Python and would still be raised inside it. What was held is re-raised once
    the step is done."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous = {s: signal.signal(s, lambda signum, frame: held.append(signum)) for s in _DEFERRED}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)
        if held:
            signal.raise_signal(held[0])


def write_bytes(path: str, data: bytes) -> None:
    """Write `data` to `path` atomically (for reports and other small outputs)."""
    path = os.fspath(path)
    with staging_folder(path) as stage:
        staged = os.path.join(stage, os.path.basename(path))
        with open(staged, "wb") as f:
            f.write(data)
        commit([(staged, path)])


def write_text(path: str, text: str, encoding: str = "utf-8") -> None:
    write_bytes(path, text.encode(encoding))
