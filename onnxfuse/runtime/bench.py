"""Timing a fused model (and its original under onnxruntime): the `onnxfuse bench` command.

Latency is wall time per run with the inputs already where the backend wants them (device
tensors on a GPU, outputs left on the device), synchronized after each run; p50/p90 over
`iters` runs after `warmup` runs. The per-segment breakdown (triton backend) brackets each
segment with CUDA events (host clock on the CPU) in separate runs, so it does not slow the
latency runs.
"""

from __future__ import annotations

import dataclasses
import statistics
import time

import numpy as np


@dataclasses.dataclass
class Timing:
    label: str
    p50_ms: float
    p90_ms: float
    mean_ms: float
    runs: int
    items_per_run: int  # batch x sequence when the inputs say so, else 1

    @property
    def throughput(self) -> float:
        """Items (tokens) per second at the median latency."""
        return self.items_per_run / (self.p50_ms / 1e3) if self.p50_ms > 0 else float("inf")

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["throughput_per_s"] = self.throughput
        return d


def summarize(label: str, samples_s: list[float], items: int) -> Timing:
    ms = sorted(s * 1e3 for s in samples_s)
    p90 = ms[min(len(ms) - 1, int(round(0.9 * (len(ms) - 1))))]
    return Timing(label, statistics.median(ms), p90, statistics.fmean(ms), len(ms), items)


def items_per_run(feeds: dict) -> int:
    """batch x sequence of the first integer 2-D input (token ids), else the first input's batch."""
    for v in feeds.values():
        shape = tuple(v.shape)
        if len(shape) == 2 and np.dtype(str(v.dtype).replace("torch.", "")).kind in "iu":
            return int(shape[0] * shape[1])
    for v in feeds.values():
        shape = tuple(v.shape)
        if len(shape) >= 2:
            return int(np.prod(shape[:-1]))
    return 1


def _sync(session):
    backend = getattr(session, "_backend", None)
    if getattr(backend, "cuda", False):
        backend.torch.cuda.synchronize()


def time_session(session, feeds: dict, *, warmup: int, iters: int, label: str) -> Timing:
    """Time an onnxfuse.InferenceSession; on the triton backend feeds go to the device once."""
    backend = session._backend
    if session.backend_name == "triton":
        dev_feeds = {k: backend._to_device(v) for k, v in feeds.items()}
        names = [o.name for o in session.get_outputs()]

        def once():
            backend.run_torch(names, dev_feeds)
    else:
        def once():
            session.run(None, feeds)
    for _ in range(warmup):
        once()
    _sync(session)
    samples = []
    for _ in range(iters):
        t0 = time.perf_counter()
        once()
        _sync(session)
        samples.append(time.perf_counter() - t0)
    return summarize(label, samples, items_per_run(feeds))


def segment_breakdown(session, feeds: dict, *, iters: int) -> list[dict]:
    """Median time of each segment of the triton backend's plan (empty for backend "ort")."""
    if session.backend_name != "triton":
        return []
    backend = session._backend
    dev_feeds = {k: backend._to_device(v) for k, v in feeds.items()}
    names = [o.name for o in session.get_outputs()]
    per: dict[int, list[float]] = {}
    labels: dict[int, str] = {}
    for _ in range(max(iters, 1)):
        marks: list = []
        backend.run_torch(names, dev_feeds, timings=marks)
        _sync(session)
        for i, (label, start, end, _host) in enumerate(marks):
            labels[i] = label
            dt = start.elapsed_time(end) if backend.cuda else (end - start) * 1e3
            per.setdefault(i, []).append(dt)
    rows = [{"segment": labels[i], "median_ms": statistics.median(v)} for i, v in sorted(per.items())]
    total = sum(r["median_ms"] for r in rows) or 1.0
    for r in rows:
        r["share"] = r["median_ms"] / total
    return rows


def _sleep_cycles_per_ms(torch) -> float:
    """How many `torch.cuda._sleep` cycles the GPU spins per millisecond (measured)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    cycles = 10_000_000
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    torch.cuda.synchronize()
    return cycles / max(start.elapsed_time(end), 1e-3)


def gpu_breakdown(session, feeds: dict, *, iters: int) -> dict:
    """GPU time of every segment with the host always ahead of the GPU (triton backend, CUDA).

    Each measured run is queued behind a `torch.cuda._sleep` long enough for the host to enqueue
    the whole run, so the CUDA events around each segment bracket its GPU work only, not the
    host's launch gaps. Returns per segment the median GPU ms and host ms (the time the host
    took to enqueue it), and per run the sum of segment GPU times, the GPU span (first start to
    last end) and the gaps between segments (about 0 when the GPU never waited for the host;
    more if some segment synchronizes the host inside onnxruntime).
    """
    backend = session._backend
    torch = backend.torch
    dev_feeds = {k: backend._to_device(v) for k, v in feeds.items()}
    names = [o.name for o in session.get_outputs()]
    for _ in range(2):
        backend.run_torch(names, dev_feeds, timings=[])
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    backend.run_torch(names, dev_feeds, timings=[])
    host_ms = (time.perf_counter() - t0) * 1e3
    torch.cuda.synchronize()
    cycles = int(_sleep_cycles_per_ms(torch) * max(5.0, 3 * host_ms))
    gpu: dict[int, list[float]] = {}
    host: dict[int, list[float]] = {}
    labels: dict[int, str] = {}
    sums, spans, gaps = [], [], []
    for _ in range(max(iters, 1)):
        marks: list = []
        torch.cuda._sleep(cycles)  # the session's stream waits for the caller's stream
        backend.run_torch(names, dev_feeds, timings=marks)
        torch.cuda.synchronize()
        times = [start.elapsed_time(end) for _, start, end, _ in marks]
        for i, (label, _, _, h) in enumerate(marks):
            labels[i] = label
            gpu.setdefault(i, []).append(times[i])
            host.setdefault(i, []).append(h * 1e3)
        sums.append(sum(times))
        spans.append(marks[0][1].elapsed_time(marks[-1][2]) if marks else 0.0)
        gaps.append(sum(marks[i][2].elapsed_time(marks[i + 1][1]) for i in range(len(marks) - 1)))
    rows = [{"segment": labels[i], "gpu_ms": statistics.median(gpu[i]), "host_ms": statistics.median(host[i])}
            for i in sorted(gpu)]
    return {
        "segments": rows,
        "gpu_sum_ms": statistics.median(sums),
        "gpu_span_ms": statistics.median(spans),
        "gaps_ms": statistics.median(gaps),
        "kernel_gpu_ms": sum(r["gpu_ms"] for r in rows if r["segment"].startswith("kernel")),
        "ort_gpu_ms": sum(r["gpu_ms"] for r in rows if not r["segment"].startswith("kernel")),
        "host_enqueue_ms": sum(r["host_ms"] for r in rows),
    }


def time_ort_original(source, feeds: dict, *, warmup: int, iters: int) -> Timing | str:
    """onnxruntime on the original model, on CUDA with IOBinding when available. Returns the
    reason as a string when ORT cannot run it."""
    from onnxfuse.diagnostics import OnnxfuseError
    from onnxfuse.runtime.ort_backend import create_ort_session, default_providers, import_ort

    ort = import_ort()
    try:
        sess = create_ort_session(source.proto, path=source.path, providers=default_providers(ort), name=source.name)
    except OnnxfuseError as e:
        return e.diagnostics[0].message
    on_cuda = "CUDAExecutionProvider" in sess.get_providers()
    host = {k: np.asarray(v) for k, v in feeds.items()}
    if on_cuda:
        binding = sess.io_binding()
        for k, v in host.items():
            binding.bind_ortvalue_input(k, ort.OrtValue.ortvalue_from_numpy(v, "cuda", 0))
        for o in sess.get_outputs():
            binding.bind_output(o.name, "cuda", 0)

        def once():
            sess.run_with_iobinding(binding)
    else:
        def once():
            sess.run(None, host)
    try:
        for _ in range(warmup):
            once()
    except Exception as e:  # ORT created the session but cannot run it
        return f"onnxruntime fails while running it: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
    samples = []
    for _ in range(iters):
        t0 = time.perf_counter()
        once()  # run_with_iobinding returns after the device work (ORT synchronizes by default)
        samples.append(time.perf_counter() - t0)
    return summarize("onnxruntime on the original (" + ("CUDA EP" if on_cuda else "CPU EP") + ")", samples,
                     items_per_run(feeds))
