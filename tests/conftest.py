"""Shared pytest setup: the repository root on sys.path (for models/ recipes) and the gpu marker."""

import functools
import os
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
# Appended, not prepended: the installed onnxfuse (with onnxfuse.passes / onnxfuse.kernels mapped
# from their folders) must win over the bare onnxfuse/ folder of the checkout.
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))


def pytest_addoption(parser):
    parser.addoption(
        "--update-golden", action="store_true",
        help="rewrite the zoo's golden files and test data (models/golden) instead of comparing with them",
    )


def pytest_configure(config):
    if config.getoption("--update-golden"):
        from models import regression

        os.environ[regression.UPDATE_ENV] = "1"


@functools.cache
def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
