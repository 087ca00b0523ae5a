"""Zoo regression: optimize every CI-sized zoo model and compare with its golden record.

For each model:
1. the quantized model's reference outputs (models/reference.py) match the stored test data
   (models/golden/NAME.npz), and its cosine similarity to the float model is the golden one and
   above the scheme's floor;
2. onnxfuse.optimize reports the golden fused counts and diagnostics (models/golden/NAME.json);
3. the optimized model runs in stock onnxruntime CPU and matches the reference outputs within
   the per-format tolerance of models/regression.py.

pytest tests/test_zoo_regression.py --update-golden rewrites the golden files; review
the diff before committing it.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest

from models import regression as rg
from models import zoo
from models.reference import cosine_similarity, run_reference

QUANTIZED = [n for n in zoo.names(ci_only=True) if zoo.entry(n).base is not None]
# Known gaps, strict so that fixing them fails the test until the golden file is updated.


@pytest.fixture(scope="module")
def zoo_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("zoo")


def _feeds_and_outputs(name: str, path: str):
    e = zoo.entry(name)
    feeds = zoo.feeds(e)
    outputs = run_reference(path, feeds)
    stored = rg.load_data(name)
    if rg.updating() or stored is None:
        if not rg.updating():
            pytest.fail(f"no test data for {name}: run pytest {__file__} --update-golden")
        rg.save_data(name, feeds, outputs)
        return feeds, outputs, outputs
    stored_feeds, stored_outputs = stored
    assert stored_feeds.keys() == feeds.keys() and all(np.array_equal(stored_feeds[k], feeds[k]) for k in feeds), \
        f"{name}: the zoo's feeds changed; update the golden data deliberately"
    return feeds, outputs, stored_outputs


def _float_kind(outputs) -> str:
    return "float16" if any(o.dtype == np.float16 for o in outputs) else "float32"


@pytest.mark.parametrize("name", QUANTIZED)
def test_zoo_model_against_golden(name, zoo_dir):
    import onnxfuse

    e = zoo.entry(name)
    path = zoo.build(name, zoo_dir)
    feeds, outputs, stored = _feeds_and_outputs(name, path)
    kind = _float_kind(outputs)

    # 1. the quantized model itself: unchanged reference outputs, expected accuracy vs float
    for got, want in zip(outputs, stored):
        scale = float(np.max(np.abs(want.astype(np.float32))))
        err = float(np.max(np.abs(got.astype(np.float32) - want.astype(np.float32))))
        assert err <= rg.MAX_ERROR[kind] * scale or e.activations, f"{name}: reference outputs drifted by {err / scale:.2e}"
    float_outputs = run_reference(zoo.build(e.base, zoo_dir), feeds)
    cosine = [round(cosine_similarity(q, f), 5) for q, f in zip(outputs, float_outputs)]
    floor = rg.QUANTIZED_COSINE_FLOOR[e.scheme]
    assert min(cosine) >= floor, f"{name}: cosine similarity to the float model {cosine} below {floor}"

    # 2. optimize: the golden report
    model, report = onnxfuse.optimize(path)
    record = {"model": name, "scheme": e.scheme, "pattern": e.pattern, "cosine_similarity": cosine} | rg.report_record(report)
    golden = rg.load_golden(name)
    if rg.updating():
        rg.save_golden(name, record)
        golden = record
    assert golden is not None, f"no golden file for {name}: run pytest {__file__} --update-golden"
    assert np.allclose(record["cosine_similarity"], golden["cosine_similarity"], atol=rg.GOLDEN_COSINE_TOLERANCE, rtol=0)
    assert {k: record[k] for k in ("fused", "diagnostics", "unfused_nodes")} == \
        {k: golden[k] for k in ("fused", "diagnostics", "unfused_nodes")}

    # 3. the optimized model in stock onnxruntime against the reference
    proto = ir.to_proto(model)
    onnx.checker.check_model(proto, full_check=True)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    fused = session.run(None, feeds)
    for i, (got, want) in enumerate(zip(fused, stored)):
        assert got.shape == want.shape and got.dtype == want.dtype
        if e.activations:
            cos = cosine_similarity(got, want)
            floor = rg.ACTIVATION_COSINE_FLOOR[e.activations]
            assert cos >= floor, f"{name} output {i}: cosine {cos:.5f} to the reference below {floor}"
        else:
            scale = float(np.max(np.abs(want.astype(np.float32))))
            err = float(np.max(np.abs(got.astype(np.float32) - want.astype(np.float32))))
            assert err <= rg.MAX_ERROR[kind] * scale, f"{name} output {i}: max error {err / scale:.2e} of max |y|"


def test_every_quantized_ci_model_has_golden_files():
    if rg.updating():
        pytest.skip("updating")
    missing = [n for n in QUANTIZED if rg.load_golden(n) is None or rg.load_data(n) is None]
    assert not missing, f"missing golden files: {missing}"
    stale = sorted({p.stem for p in rg.GOLDEN_DIR.glob("*.json")} - set(QUANTIZED))
    assert not stale, f"golden files without a zoo model: {stale}"
