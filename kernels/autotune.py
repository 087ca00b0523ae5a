"""A small on-disk autotuner: the chosen launch config per (GPU, Triton version, kernel, shape bucket).

A deployed process reads the file once and never re-tunes a bucket it has seen. The file lives in
$ONNXFUSE_CACHE_DIR (default ~/.cache/onnxfuse/autotune), one JSON file per GPU name and Triton
version, written atomically (temporary file, then rename) so concurrent processes at worst
repeat a measurement. ONNXFUSE_AUTOTUNE=0 skips measuring and uses each kernel's heuristic
default (the interpreter always does).

Each tuning is reported on the logger "onnxfuse.kernels.autotune" (INFO: key, configs timed,
seconds, the choice), and printed to stderr under TRITON_PRINT_AUTOTUNING=1 as Triton's own
autotuner does.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Sequence

_log = logging.getLogger(__name__)


def cache_dir() -> Path:
    env = os.environ.get("ONNXFUSE_CACHE_DIR")
    if env:
        return Path(env)
    return Path.home() / ".cache" / "onnxfuse" / "autotune"


def m_bucket(m: int) -> int:
    """Rows of A rounded up to a power of two (at most 4096): configs are shared inside a bucket."""
    b = 1
    while b < m and b < 4096:
        b *= 2
    return b


class TuningCache:
    """The configs chosen on one GPU under one Triton version, backed by one JSON file."""

    def __init__(self, device_name: str, triton_version: str, directory: Path | None = None):
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{device_name}-triton{triton_version}")
        self.path = (directory or cache_dir()) / f"{safe}.json"
        self._entries: dict[str, dict] | None = None

    def _load(self) -> dict[str, dict]:
        if self._entries is None:
            try:
                self._entries = json.loads(self.path.read_text())
            except (OSError, ValueError):
                self._entries = {}
        return self._entries

    def get(self, key: str) -> dict | None:
        return self._load().get(key)

    def put(self, key: str, config: dict, *, persist: bool = True) -> None:
        """Remember config for key in this process, and on disk unless persist is False."""
        entries = self._load()
        entries[key] = config
        if not persist:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # Merge with what another process may have written meanwhile.
            try:
                on_disk = json.loads(self.path.read_text())
            except (OSError, ValueError):
                on_disk = {}
            on_disk.update(entries)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".tune-", suffix=".json")
            with os.fdopen(fd, "w") as f:
                json.dump(on_disk, f, indent=1, sort_keys=True)
            os.replace(tmp, self.path)
        except OSError:
            pass  # a read-only home only costs re-tuning in the next process


def tuning_enabled() -> bool:
    from onnxfuse.kernels import triton_env

    return not triton_env.interpreting() and os.environ.get("ONNXFUSE_AUTOTUNE", "1") != "0"


REFINE_TOP = 3  # how many of the first round's fastest configs refine() varies
COMPILE_THREADS = 16  # at most, for compiling a key's candidates ahead of timing them


def choose(cache: TuningCache, key: str, candidates: Callable[[], Sequence[dict]],
           time_one: Callable[[dict], float],
           refine: Callable[[dict], Sequence[dict]] | None = None,
           compile_one: Callable[[dict], None] | None = None) -> dict:
    """The cached config for key, else the fastest of candidates() by time_one (milliseconds),
    cached. The list is built only on a miss: building it costs more host time than a hit.

    compile_one(cfg), if given, compiles a config without running it (Triton warmups); every
    candidate is compiled first, in Triton's parallel build (AsyncCompileMode), so the timing loop
    finds each one built instead of compiling them one after the other.

    refine(cfg), if given, lists variants of a config (another split-K, say) that are timed in a
    second round for the REFINE_TOP fastest of the first: a few more timings instead of
    multiplying the whole list by every variant."""
    hit = cache.get(key)
    if hit is not None:
        return hit
    candidates = candidates()
    if not tuning_enabled() or (len(candidates) == 1 and refine is None):
        return dict(candidates[0])
    t0 = time.perf_counter()
    if compile_one is not None:
        _compile_all(candidates, compile_one)
    timed = _time_all(candidates, time_one)
    tried = len(candidates)
    if refine is not None:
        variants = [v for cfg, _ in sorted(timed, key=lambda ct: ct[1])[:REFINE_TOP] for v in refine(cfg) if v != cfg]
        if compile_one is not None:
            _compile_all(variants, compile_one)
        tried += len(variants)
        timed += _time_all(variants, time_one)
    best, best_t = min(timed, key=lambda ct: ct[1], default=(None, float("inf")))
    elapsed = time.perf_counter() - t0
    if best is None:
        _log.warning("autotune %s: none of %d configs ran (%.1f s); using the first, untimed", key,
                     tried, elapsed)
        cache.put(key, dict(candidates[0]), persist=False)  # not again in this process; the next one retries
        return dict(candidates[0])
    chosen = dict(best)
    cache.put(key, chosen)
    _report(f"autotune {key}: {tried} configs in {elapsed:.1f} s; best {1e3 * best_t:.1f} us: {chosen}")
    return chosen


def _time_all(configs: Sequence[dict], time_one: Callable[[dict], float]) -> list[tuple[dict, float]]:
    """(config, ms) for each config that runs; one that fails to compile (out of shared memory,
    say) is skipped."""
    timed = []
    for cfg in configs:
        try:
            timed.append((cfg, time_one(cfg)))
        except Exception:  # noqa: BLE001 - any compile or launch failure only drops that config
            continue
    return timed


def _compile_all(configs: Sequence[dict], compile_one: Callable[[dict], None]) -> None:
    """compile_one over configs inside triton.AsyncCompileMode, whose thread pool builds the kernels
    its warmups submit, all at once; a failure is left for the timing round to skip."""
    from onnxfuse.kernels import triton_env

    _, triton, _ = triton_env.load()
    try:
        with ThreadPoolExecutor(max(1, min(COMPILE_THREADS, os.cpu_count() or 1, len(configs)))) as pool, \
                triton.AsyncCompileMode(pool, ignore_errors=True):
            for cfg in configs:
                try:
                    compile_one(cfg)
                except Exception:  # noqa: BLE001 - time_one meets the same error and drops the config
                    pass
    except RuntimeError as e:  # a caller's own AsyncCompileMode is active: the timing loop compiles
        _log.debug("autotune: no ahead-of-time compile (%s)", e)


def _report(message: str) -> None:
    _log.info(message)
    if os.environ.get("TRITON_PRINT_AUTOTUNING", "0") not in ("", "0"):
        print(f"onnxfuse {message}", file=sys.stderr)


_caches: dict[tuple, TuningCache] = {}


def cache_for_device(device) -> TuningCache:
    """One TuningCache per (device, directory) in this process. Called on every kernel call, so a
    hit does no path or device-name work."""
    key = (device.type, device.index, os.environ.get("ONNXFUSE_CACHE_DIR"))
    cache = _caches.get(key)
    if cache is None:
        from onnxfuse.kernels import triton_env

        torch, triton, _ = triton_env.load()
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else "interpreter"
        cache = _caches[key] = TuningCache(name, triton.__version__, cache_dir())
    return cache
