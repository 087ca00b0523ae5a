"""Every diagnostic code is unique and documented in docs/diagnostics.md."""

import pathlib
import re

from onnxfuse import codes

DOC = pathlib.Path(__file__).resolve().parents[1] / "docs" / "diagnostics.md"


def test_codes_are_unique():
    ids = [c.id for c in codes.all_codes()]
    names = [c.name for c in codes.all_codes()]
    assert len(ids) == len(set(ids))
    assert len(names) == len(set(names))
    assert all(re.fullmatch(r"OFX\d{3}", i) for i in ids)


def test_every_code_is_documented_and_nothing_else():
    documented = dict(re.findall(r"^\| (OFX\d{3}) \| `([a-z0-9-]+)` \|", DOC.read_text(), re.M))
    assert documented == {c.id: c.name for c in codes.all_codes()}
