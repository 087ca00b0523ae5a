"""The bad-input corpus through the real command line, each case in a child process (issue 7).

For every case of tests/bad_inputs.py: the exit status its kind demands, a message naming the
file and the node or tensor, no traceback and no internal error, every input file unchanged
(hashed), no output file (and no temporary) after a failure, a whole and valid output after a
success, and bounded time and address space. All child processes run up front, two at a time.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import os
import pathlib
import threading

import onnx
import pytest

from tests import bad_inputs, cli_runner

# kind -> {run label: allowed exit statuses}
EXPECTED = {
    "load": {"optimize": {1}, "check": {1}},
    "output": {"optimize": {1}},
    "pattern": {"optimize": {0}, "strict": {1}, "check": {1}},
    "warning": {"optimize": {0}, "strict": {0}, "check": {0}},
    "kept": {"optimize": {0}, "strict": {0}, "check": {0}},
    "refused": {"optimize": {0, 1}, "strict": {1}, "check": {1}},
    "survive": {"optimize": {0, 1}, "check": {0, 1}},
}
JSON_CASES = {"truncated_model", "external_data_dotdot", "graph_cycle", "scale_nan", "custom_domain_op"}
OUTPUTS = {"optimize": "out.onnx", "strict": "out_strict.onnx"}


def _args(label: str, built: bad_inputs.Built) -> list[str]:
    if label == "check":
        return ["check", built.input]
    if label == "check_json":
        return ["check", "--json", built.input]
    out = built.output if label == "optimize" else str(pathlib.Path(built.output).with_name(OUTPUTS[label]))
    return ["optimize", *(["--strict"] if label == "strict" else []), *built.options, built.input, "-o", out]


def _hashes(root: pathlib.Path, skip: set[str]) -> dict[str, str]:
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_symlink() or not p.is_file() or p.name in skip:
            continue
        st = p.stat()
        if st.st_size > 256 * 1024**2:  # the sparse oversized file: its size and mtime say enough
            out[str(p.relative_to(root))] = f"{st.st_size}:{st.st_mtime_ns}"
        else:
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


class Outcome:
    def __init__(self, bad, root, built, before, existed):
        self.bad, self.root, self.built, self.before, self.existed = bad, root, built, before, existed
        self.results: dict[str, cli_runner.Result] = {}


def _run_case(bad: bad_inputs.BadInput, base: pathlib.Path, run) -> Outcome:
    root = base / bad.name
    folder = root / "m"
    folder.mkdir(parents=True)
    built = bad.build(folder)
    outputs = {pathlib.Path(_args(label, built)[-1]).name for label in OUTPUTS}
    skip = {n for o in outputs for n in (o, o + ".data")} if bad.kind != "output" else set()
    before = _hashes(root, skip)
    existed = {label: os.path.lexists(_args(label, built)[-1]) for label in OUTPUTS}
    outcome = Outcome(bad, root, built, before, existed)
    labels = list(EXPECTED[bad.kind]) + (["check_json"] if bad.name in JSON_CASES else [])
    for label in labels:
        outcome.results[label] = run(_args(label, built), cwd=str(root))
    return outcome


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    """Every case, each command in its own forked process (tests/cli_forkserver.py), two at a time."""
    base = tmp_path_factory.mktemp("corpus")
    local = threading.local()
    servers = []

    def run_case(bad):
        if not hasattr(local, "server"):
            local.server = cli_runner.ForkServer()
            servers.append(local.server)
        return _run_case(bad, base, local.server.run)

    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            done = list(pool.map(run_case, bad_inputs.CASES))
    finally:
        for server in servers:
            server.close()
    return {o.bad.name: o for o in done}


# One case of each kind (and two bombs) through the literal `python -m onnxfuse`, under prlimit.
ENTRY_CASES = ["random_bytes", "external_data_symlink_outside", "bomb_raw_data", "bomb_external_data",
               "graph_cycle", "output_equals_input", "scale_e8m0_nan_code", "scale_zero", "custom_domain_op",
               "dq_without_scale_input", "duplicate_node_names"]


@pytest.fixture(scope="module")
def entry_outcomes(tmp_path_factory):
    base = tmp_path_factory.mktemp("entry")
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        done = list(pool.map(lambda n: _run_case(bad_inputs.by_name(n), base, cli_runner.run), ENTRY_CASES))
    return {o.bad.name: o for o in done}


def _checker_problem(model) -> str | None:
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as e:  # noqa: BLE001 - the checker's verdict, as a reason
        return str(e).strip().splitlines()[0]
    return None


def _expect_whole_model(path: str, original: str) -> onnx.ModelProto:
    """The output loads whole (with its external data) and is valid if the input was."""
    model = onnx.load(path)  # loads its external data too: a partial pair would fail here
    why = _checker_problem(model)
    if why and _checker_problem(onnx.load(original)) is None:
        raise AssertionError(f"the input passes onnx.checker but the output does not: {why}")
    return model


def _dq_unchanged(original: onnx.ModelProto, written: onnx.ModelProto, node_name: str) -> str | None:
    """Why the node `node_name` (and the initializers it reads) differ between the models, or None."""
    def find(m):
        return next((n for n in m.graph.node if n.name == node_name), None)

    a, b = find(original), find(written)
    if b is None:
        return f"node '{node_name}' is gone"
    if (a.op_type, a.domain, list(a.input), a.attribute) != (b.op_type, b.domain, list(b.input), b.attribute):
        return f"node '{node_name}' changed: {b}"
    inits_a = {t.name: t for t in original.graph.initializer}
    inits_b = {t.name: t for t in written.graph.initializer}
    for name in a.input:
        if name in inits_a and (name not in inits_b or inits_b[name] != inits_a[name]):
            return f"initializer '{name}' changed or is gone"
    return None


# Failures in other owners' modules, routed through the lead: name -> reason, marked
# xfail(strict=True) so that a fix shows as XPASS and the entry goes. Empty: all fixed.
KNOWN_BUGS: dict[str, str] = {}


def _params(cases):
    return [pytest.param(c, id=c.name, marks=[pytest.mark.xfail(strict=True, reason=KNOWN_BUGS[c.name])]
                         if c.name in KNOWN_BUGS else []) for c in cases]


@pytest.mark.parametrize("bad", _params(bad_inputs.CASES))
def test_bad_input(outcomes, bad):
    _judge(outcomes[bad.name])


@pytest.mark.parametrize("bad", _params([bad_inputs.by_name(n) for n in ENTRY_CASES]))
def test_bad_input_through_python_dash_m(entry_outcomes, bad):
    _judge(entry_outcomes[bad.name])


def _judge(o: Outcome) -> None:
    bad = o.bad
    problems = []
    for label, r in o.results.items():
        what = f"{label} ({' '.join(r.args[:-1])} ...)"
        if r.returncode is None:
            problems.append(f"{what}: still running after {cli_runner.TIMEOUT_S} s")
            continue
        allowed = EXPECTED[bad.kind].get(label, {0, 1} if label != "check_json" else EXPECTED[bad.kind]["check"])
        if r.returncode not in allowed:
            problems.append(f"{what}: exit {r.returncode}, want {sorted(allowed)}\n{r.output[-2000:]}")
        if "Traceback" in r.output:
            problems.append(f"{what}: printed a traceback\n{r.output[-3000:]}")
        if "OFX099" in r.output or "internal-error" in r.output:
            problems.append(f"{what}: an internal error\n{r.output[-2000:]}")
        if r.returncode not in (None, 0) and bad.codes and not any(c in r.output for c in bad.codes):
            problems.append(f"{what}: none of the codes {bad.codes} in\n{r.output[-2000:]}")
        if r.returncode == 1 or (bad.kind in ("pattern", "warning") and label == "optimize"):
            missing = [w for w in bad.names if w.replace("\0", "\\0") not in r.output]
            if missing:
                problems.append(f"{what}: message does not name {missing}\n{r.output[-2000:]}")
            if bad.kind in ("pattern", "warning") and not any(c in r.output for c in bad.codes):
                problems.append(f"{what}: the diagnostic {bad.codes} is not reported\n{r.output[-2000:]}")
            # The file at fault: the input, or for a bad output path the output (or report) given.
            at_fault = [o.built.input] if bad.kind != "output" else [o.built.output, *o.built.options[1:2]]
            shown = [pathlib.Path(f).name for f in at_fault]
            if r.returncode == 1 and not any(name in r.output for name in shown):
                problems.append(f"{what}: message does not name the file {shown}\n{r.output[-2000:]}")
        if label == "check_json" and r.returncode is not None:
            import json

            try:
                doc = json.loads(r.stdout)
                assert isinstance(doc["diagnostics"], list), "no diagnostics list"
                assert doc["diagnostics"] or r.returncode == 0, "exit 1 without a diagnostic"
                assert all({"code", "severity", "message"} <= set(d) for d in doc["diagnostics"])
            except Exception as e:  # noqa: BLE001 - collected as a problem
                problems.append(f"{what}: stdout is not the diagnostics JSON ({e}): {r.stdout[:500]!r}")
        if label in OUTPUTS:
            out = r.args[-1]
            if r.returncode != 0 and not o.existed[label] and os.path.lexists(out):
                problems.append(f"{what}: failed but left '{out}'")
            if r.returncode == 0 and bad.kind != "output":
                try:
                    written = _expect_whole_model(out, o.built.input)
                    if bad.kind in ("pattern", "warning") and bad.kind == "pattern":
                        why = _dq_unchanged(onnx.load(o.built.input), written, "dq_w")
                        if why:
                            problems.append(f"{what}: the refused pattern was not left as it was: {why}")
                    if bad.kind == "kept" and not any(n.name == "custom" for n in written.graph.node):
                        problems.append(f"{what}: the custom node is gone")
                except Exception as e:  # noqa: BLE001 - collected as a problem
                    problems.append(f"{what}: exit 0 but the output is not a whole valid model: {e}")
    leftovers = [str(p) for p in o.root.rglob("*") if ".onnxfuse-tmp." in p.name or p.name.endswith(".tmp")]
    if leftovers:
        problems.append(f"temporary files left: {leftovers}")
    skip = {n for label in OUTPUTS for n in (OUTPUTS[label], OUTPUTS[label] + ".data")} if bad.kind != "output" else set()
    if _hashes(o.root, skip) != o.before:
        problems.append("an input file changed (hash differs)")
    assert not problems, f"{bad.name}:\n" + "\n".join(problems)


def test_corpus_is_big_enough():
    kinds = {c.kind for c in bad_inputs.CASES}
    assert {"load", "output", "pattern", "warning", "kept", "survive"} <= kinds
    assert len(bad_inputs.CASES) >= 60
    assert sum(c.bomb for c in bad_inputs.CASES) >= 6


def test_a_closed_stdout_is_not_an_internal_error(tmp_path):
    """`onnxfuse check --json m.onnx | head -c 1`: the reader goes away; no internal error, no traceback."""
    import subprocess
    import sys

    path = pathlib.Path(bad_inputs.by_name("scale_nan").build(tmp_path).input)
    p = subprocess.Popen([sys.executable, "-m", "onnxfuse", "check", "--json", str(path)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()  # nobody reads: the first write fails with EPIPE
    err = p.stderr.read().decode()
    p.wait(timeout=60)
    assert "OFX099" not in err and "Traceback" not in err, err
