"""backend="triton": fused ops in the Triton kernels, standard-op segments in onnxruntime.

The graph is planned once (onnxfuse.runtime.plan). On a GPU:
- ORT segments run on the CUDA EP with IOBinding on torch device buffers; no host round trips;
- ORT and the kernels share one CUDA stream (ORT's `user_compute_stream`), so no synchronization
  is needed between segments and ORT is told not to synchronize at the end of each run;
- intermediate buffers are reused across runs of the same input shapes (bound ORT outputs and the
  `out=` of DequantMatMul), and each value is dropped after its last reader;
- with cuda_graph=True a whole run is captured once per input signature and replayed.
Without a GPU the kernels run in Triton's interpreter and ORT on the CPU (slow: for tests).
"""

from __future__ import annotations

import os
import time
import warnings

import numpy as np
import onnx

from onnxfuse import codes
from onnxfuse.diagnostics import Diagnostic, OnnxfuseError
from onnxfuse.runtime import kernel_calls
from onnxfuse.runtime.ort_backend import create_ort_session, import_ort
from onnxfuse.runtime.plan import Plan, make_plan, submodel
from onnxfuse.runtime.value_types import value_types


def import_torch():
    try:
        import torch
    except ImportError as e:
        raise OnnxfuseError.of(
            codes.MISSING_DEPENDENCY, 'backend="triton" needs torch and triton',
            hint='pip install torch triton (GPU), or use backend="ort"',
        ) from e
    return torch


def import_kernels(torch):
    if not torch.cuda.is_available():
        # Must precede the first `import triton` (docs/kernels.md).
        os.environ.setdefault("TRITON_INTERPRET", "1")
    try:
        import onnxfuse.kernels as kernels
    except ImportError as e:
        raise OnnxfuseError.of(codes.MISSING_DEPENDENCY, f"the Triton kernels cannot be imported: {e}",
                               hint="pip install triton") from e
    return kernels


class TritonBackend:
    name = "triton"

    def __init__(self, source, *, providers=None, sess_options=None, cuda_graph=False, kernels=None):
        torch = import_torch()
        self.torch = torch
        self.source = source
        self.kernels = kernels if kernels is not None else import_kernels(torch)
        self.cuda = torch.cuda.is_available()
        self.device = torch.device("cuda", torch.cuda.current_device()) if self.cuda else torch.device("cpu")
        self.stream = torch.cuda.Stream(device=self.device) if self.cuda else None
        model = source.inline_external_data()
        self.plan: Plan = make_plan(model, lambda n: kernel_calls.kernel_reason(n, self.kernels))
        self.diagnostics = [
            Diagnostic.warning(
                codes.NO_KERNEL, f"{f.op_type} runs through its function body in onnxruntime: {f.reason}",
                node=f.node, file=source.name,
            )
            for f in self.plan.fallbacks
        ]
        for d in self.diagnostics:
            warnings.warn(d.to_text(), stacklevel=3)
        self.graph_outputs = [o.name for o in model.graph.output]
        self.graph_input_names = {i.name for i in model.graph.input}
        self._constants = self._load_constants(model)
        self._ort_provider_names: list[str] = []
        self._segments = self._make_ort_runners(model, providers, sess_options)
        for gi, seg in enumerate(self.plan.segments):
            if seg.kind == "kernel":
                self._segments[gi] = _KernelStep(kernel_calls.PreparedKernel(seg.nodes[0], self._constants, self.kernels),
                                                 self)
        self._drops: dict = {}  # output names -> per segment, the values dropped after it
        self.cuda_graph = bool(cuda_graph) and self.cuda
        if cuda_graph and not self.cuda:
            warnings.warn("cuda_graph=True has no effect without a CUDA GPU", stacklevel=3)
        self._graphs: dict = {}
        run_options = None
        if self.cuda:
            run_options = import_ort().RunOptions()
            # Same stream as the kernels: ORT must not block the host at the end of each segment.
            run_options.add_run_config_entry("disable_synchronize_execution_providers", "1")
        self._run_options = run_options

    # -- setup ------------------------------------------------------------------------------
    def _load_constants(self, model: onnx.ModelProto) -> dict:
        """Initializers the kernels (or graph outputs) read, as device tensors, once, each in the
        layout its kernels read fastest (kernels.prepare_constant: strides only, never values)."""
        from onnxfuse.runtime.torch_dtypes import to_torch

        kernel_segments = [s for s in self.plan.segments if s.kind == "kernel"]
        wanted = {n for s in kernel_segments for n in s.initializers}
        wanted |= set(self.graph_outputs)
        uses = kernel_calls.constant_uses(s.nodes[0] for s in kernel_segments)
        prepare = getattr(self.kernels, "prepare_constant", None)
        out = {}
        for t in model.graph.initializer:
            if t.name in wanted:
                x = to_torch(onnx.numpy_helper.to_array(t), self.device)
                if prepare is not None and t.name not in self.graph_outputs:
                    x = prepare(x, uses.get(t.name, ()))
                out[t.name] = x
        return out

    def _make_ort_runners(self, model, providers, sess_options) -> list:
        ort_segments = [s for s in self.plan.segments if s.kind == "ort"]
        if not ort_segments:
            return [None] * len(self.plan.segments)
        ort = import_ort()
        if self.cuda:
            if "CUDAExecutionProvider" not in ort.get_available_providers():
                raise OnnxfuseError.of(
                    codes.BACKEND_UNAVAILABLE,
                    f"this machine has a CUDA GPU but onnxruntime {ort.__version__} has no CUDA execution provider; "
                    f"{len(ort_segments)} segment(s) of standard ops need it",
                    file=self.source.name,
                    hint="pip uninstall onnxruntime && pip install onnxruntime-gpu, or use backend=\"ort\"",
                )
            # use_tf32=0: float32 MatMul/Conv keep float32 precision, as the kernels' own float32 paths do
            options = {"device_id": str(self.device.index), "user_compute_stream": str(self.stream.cuda_stream),
                       "use_tf32": "0"}
            providers = [("CUDAExecutionProvider", options)]
        else:
            providers = ["CPUExecutionProvider"]
        types = value_types(model)
        runners = []
        for s in self.plan.segments:
            if s.kind != "ort":
                runners.append(None)
                continue
            sess = create_ort_session(submodel(model, s, types), path=None, providers=providers,
                                      sess_options=sess_options, name=self.source.name)
            self._ort_provider_names = sess.get_providers()
            runners.append(_OrtSegment(sess, s, self))
        return runners

    def providers(self) -> list[str]:
        return self._ort_provider_names or (["CUDAExecutionProvider"] if self.cuda else ["CPUExecutionProvider"])

    # -- running ----------------------------------------------------------------------------
    def run_torch(self, output_names: list[str], feeds: dict, *, timings: list | None = None) -> list:
        """feeds: name -> torch tensor or NumPy array. Returns torch tensors on the backend's device."""
        torch = self.torch
        inputs = {k: self._to_device(v) for k, v in feeds.items()}
        if not self.cuda:
            return self._execute(inputs, output_names, timings)
        caller = torch.cuda.current_stream(self.device)
        self.stream.wait_stream(caller)
        with torch.cuda.stream(self.stream):
            for t in inputs.values():
                t.record_stream(self.stream)
            if self.cuda_graph and timings is None:
                outs = self._run_graph(inputs, output_names)
            else:
                outs = self._execute(inputs, output_names, timings)
        caller.wait_stream(self.stream)
        for t in outs:
            t.record_stream(caller)
        return outs

    def _to_device(self, x):
        from onnxfuse.runtime.torch_dtypes import to_torch

        if type(x).__module__.startswith("torch"):
            return x.to(self.device, non_blocking=True) if x.device != self.device else x
        return to_torch(np.asarray(x), self.device)

    def _execute(self, inputs: dict, output_names: list[str], timings: list | None) -> list:
        env = dict(inputs)
        key = tuple(output_names)
        drops = self._drops.get(key)
        if drops is None:
            drops = self._drops[key] = self._drop_lists(set(output_names))
        signature = tuple((k, tuple(v.shape), v.dtype) for k, v in sorted(inputs.items()))
        for step, drop in zip(self._segments, drops):
            if timings is None:
                step.run(env, signature)
            else:
                t0 = time.perf_counter()
                start = self._mark(timings)
                step.run(env, signature)
                end = self._mark(timings)
                timings.append((step.label, start, end, time.perf_counter() - t0))
            for name in drop:
                env.pop(name, None)
        out = []
        for name in output_names:
            if name in env:
                out.append(env[name])
            elif name in self._constants:
                out.append(self._constants[name])
            else:
                raise OnnxfuseError.of(codes.INTERNAL, f"output '{name}' was not computed", file=self.source.name)
        return out

    def _drop_lists(self, keep: set) -> list[tuple[str, ...]]:
        """Per segment, the values no later segment reads (and the caller did not ask for)."""
        return [tuple(n for n in seg.inputs if self.plan.last_use.get(n) == gi and n not in keep)
                for gi, seg in enumerate(self.plan.segments)]

    def _mark(self, timings):
        if timings is None:
            return None
        if self.cuda:
            ev = self.torch.cuda.Event(enable_timing=True)
            ev.record(self.stream)
            return ev
        return time.perf_counter()

    def _run_graph(self, inputs: dict, output_names: list[str]) -> list:
        """Capture the whole run once per input signature, then replay it."""
        torch = self.torch
        key = (tuple(output_names),) + tuple((k, tuple(v.shape), v.dtype) for k, v in sorted(inputs.items()))
        entry = self._graphs.get(key)
        if entry is None:
            # Warm up outside capture: compiles kernels, autotunes, lets ORT size its arena.
            self._execute(inputs, output_names, None)
            self._execute(inputs, output_names, None)
            static_in = {k: v.clone() for k, v in inputs.items()}
            graph = torch.cuda.CUDAGraph()
            inner = []  # the error raised inside the capture: leaving it raises a vaguer one
            try:
                with torch.cuda.graph(graph, stream=self.stream):
                    try:
                        static_out = self._execute(static_in, output_names, None)
                    except Exception as e:
                        inner.append(e)
                        raise
            except Exception as e:
                self.cuda_graph = False
                warnings.warn(_capture_failure(inner[0] if inner else e), stacklevel=4)
                return self._execute(inputs, output_names, None)
            entry = self._graphs[key] = (graph, static_in, static_out)
        graph, static_in, static_out = entry
        for k, v in inputs.items():
            static_in[k].copy_(v, non_blocking=True)
        graph.replay()
        # The static outputs are overwritten by the next replay: hand out copies.
        return [t.clone() for t in static_out]


def _capture_failure(e: Exception) -> str:
    text = str(e)
    first_line = text.partition("\n")[0][:400]
    msg = f"CUDA graph capture failed, running without a graph: {type(e).__name__}: {first_line}"
    if "captur" in text:
        msg += (" (onnxruntime synchronized with the host inside a segment, typically around nodes it"
                " placed on the CPU such as shape computations; a graph cannot hold that)")
    return msg


class _KernelStep:
    """A fused node's prepared kernel call; DequantMatMul writes into a buffer reused per input
    signature unless its result is a graph output (handed to the caller)."""

    def __init__(self, call: "kernel_calls.PreparedKernel", backend: TritonBackend):
        self.call = call
        self.backend = backend
        self.label = f"kernel {call.op_type} '{call.node.name or call.output}'"
        self.reuse_out = call.accepts_out and call.output not in backend.graph_outputs
        self._out: dict = {}  # input signature -> output buffer

    def run(self, env: dict, signature) -> None:
        out = self._out.get(signature) if self.reuse_out else None
        try:
            y = self.call(env, out)
        except OnnxfuseError:
            raise
        except Exception as e:
            node = self.call.node
            raise OnnxfuseError.of(
                codes.INTERNAL, f"the {node.op_type} kernel failed: {type(e).__name__}: {e}",
                node=node.name or self.call.output, file=self.backend.source.name,
            ) from e
        if self.reuse_out and out is None:
            self._out[signature] = y
        env[self.call.output] = y


class _DeviceBinding:
    """A persistent IOBinding of one ORT segment for one input signature: intermediate outputs
    bound once to buffers owned here, inputs rebound only when their device pointer changes,
    graph outputs bound to fresh buffers each run (the caller keeps them)."""

    def __init__(self, session, segment, shapes: dict, backend: TritonBackend):
        torch = backend.torch
        from onnxfuse.runtime.torch_dtypes import np_dtype_of_torch

        self.binding = session.io_binding()
        self.dev = backend.device.index
        self.device = backend.device
        self.inputs = segment.inputs
        self.bound: dict = {}  # input name -> (data_ptr, shape, dtype) last bound
        self.outputs: dict = {}  # output name -> persistent buffer
        self.fresh: list = []  # (name, shape, torch dtype, numpy dtype) of graph outputs
        for n in segment.outputs:
            shape, dtype = shapes[n]
            if n in backend.graph_outputs:
                self.fresh.append((n, shape, dtype, np_dtype_of_torch(dtype)))
                continue
            buf = torch.empty(shape, dtype=dtype, device=backend.device)
            self.outputs[n] = buf
            _bind_output(self.binding, n, buf, self.dev, np_dtype_of_torch(dtype))
        self.empty = torch.empty
        self.run = _binding_runner(session, self.binding, backend._run_options)

    def bind(self, env: dict) -> dict:
        for n in self.inputs:
            t = env[n]
            if not t.is_contiguous():
                t = env[n] = t.contiguous()
            key = (t.data_ptr(), t.shape, t.dtype)
            if self.bound.get(n) != key:
                _bind_input(self.binding, n, t, self.dev)
                self.bound[n] = key
        result = dict(self.outputs)
        for n, shape, dtype, np_dtype in self.fresh:
            buf = result[n] = self.empty(shape, dtype=dtype, device=self.device)
            _bind_output(self.binding, n, buf, self.dev, np_dtype)
        return result


class _OrtSegment:
    """One ORT sub-session: host NumPy on the CPU, IOBinding on device buffers on a GPU."""

    def __init__(self, session, segment, backend: TritonBackend):
        self.session = session
        self.segment = segment
        self.backend = backend
        self.label = segment.label
        self.output_types = {o.name: o.type for o in session.get_outputs()}
        self._bindings: dict = {}  # input signature -> _DeviceBinding (shapes learnt on the first run)
        self._static_outputs = True

    def run(self, env: dict, signature) -> None:
        if not self.backend.cuda:
            env.update(self._run_host(env))
        else:
            env.update(self._run_device(env, signature))

    def _run_host(self, env: dict) -> dict:
        from onnxfuse.runtime.torch_dtypes import to_numpy, to_torch

        feeds = {n: to_numpy(env[n]) for n in self.segment.inputs}
        try:
            outs = self.session.run(list(self.segment.outputs), feeds)
        except Exception as e:
            raise _segment_error(e, self.backend.source.name, self.segment) from e
        return {n: to_torch(np.asarray(v)) for n, v in zip(self.segment.outputs, outs)}

    def _run_device(self, env: dict, signature) -> dict:
        bound = self._bindings.get(signature) if self._static_outputs else None
        if bound is None:
            return self._run_learning(env, signature)
        result = bound.bind(env)
        try:
            bound.run()
        except Exception:
            # Output shapes depend on values, not only on input shapes: stop preallocating.
            self._static_outputs = False
            self._bindings.clear()
            return self._run_learning(env, signature)
        return result

    def _run_learning(self, env: dict, signature) -> dict:
        """A run with ORT-allocated outputs; records their shapes for a persistent binding."""
        torch = self.backend.torch
        dev = self.backend.device.index
        binding = self.session.io_binding()
        for n in self.segment.inputs:
            t = env[n]
            if not t.is_contiguous():
                t = env[n] = t.contiguous()
            _bind_input(binding, n, t, dev)
        for n in self.segment.outputs:
            binding.bind_output(n, "cuda", dev)
        try:
            self.session.run_with_iobinding(binding, self.backend._run_options)
        except Exception as e:
            raise _segment_error(e, self.backend.source.name, self.segment) from e
        values = binding.get_outputs()
        result = {n: _torch_from_ortvalue(torch, v) for n, v in zip(self.segment.outputs, values)}
        if self._static_outputs:
            shapes = {n: (tuple(t.shape), t.dtype) for n, t in result.items()}
            self._bindings[signature] = _DeviceBinding(self.session, self.segment, shapes, self.backend)
        return result


def _binding_runner(session, binding, run_options):
    """A no-argument call running the session on the binding. ORT's Python wrapper re-checks the
    binding (and, in newer versions, graph-capture state) on every call; the C++ call it ends in
    is taken once here when this onnxruntime exposes it."""
    c_session, c_binding = getattr(session, "_sess", None), getattr(binding, "_iobinding", None)
    if c_session is not None and c_binding is not None and hasattr(c_session, "run_with_iobinding"):
        return lambda: c_session.run_with_iobinding(c_binding, run_options)
    return lambda: session.run_with_iobinding(binding, run_options)


def _bind_input(binding, name, t, dev: int):
    from onnxfuse.runtime.torch_dtypes import np_dtype_of_torch

    dtype = np_dtype_of_torch(t.dtype)
    if dtype.kind == "V" or dtype.name == "bfloat16":
        from onnxruntime import OrtValue

        binding.bind_ortvalue_input(name, OrtValue.from_dlpack(t.__dlpack__(), False))
        return
    binding.bind_input(name, "cuda", dev, dtype, tuple(t.shape), t.data_ptr())


def _bind_output(binding, name, t, dev: int, dtype):
    if dtype.name == "bfloat16":
        from onnxruntime import OrtValue

        binding.bind_ortvalue_output(name, OrtValue.from_dlpack(t.__dlpack__(), False))
        return
    binding.bind_output(name, "cuda", dev, dtype, tuple(t.shape), t.data_ptr())


def _torch_from_ortvalue(torch, v):
    """Zero-copy view of an ORT-allocated device tensor (the capsule keeps ORT's buffer alive)."""
    try:
        return torch.utils.dlpack.from_dlpack(v._ortvalue.to_dlpack())
    except (AttributeError, TypeError):
        return torch.from_dlpack(v)


def _segment_error(e: Exception, file: str, segment) -> OnnxfuseError:
    first = segment.nodes[0]
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return OnnxfuseError.of(
        codes.BACKEND_UNAVAILABLE, f"onnxruntime failed in a segment of {len(segment.nodes)} node(s): {text}",
        node=first.name or first.output[0], file=file,
    )
