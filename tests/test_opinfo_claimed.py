"""Regression check of the OpInfo entries the device claims (tests/opinfo/claimed_ops.txt).

tests/opinfo/run_opinfo.py --write-claimed lists the float32 entries of PyTorch's OpInfo database
that matched the CPU on every sample; this test re-runs each of them on its first few sample inputs
(CPU fallback off) so a lowering change that breaks a claimed op fails `make test`.
"""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("expecttest")  # torch.testing._internal needs it (installed by `make venv`)

from opinfo import run_opinfo  # noqa: E402  (tests/ is on sys.path under pytest's rootdir import mode)

SAMPLES = 2
CLAIMED = run_opinfo.read_claimed()
_DB = {run_opinfo.entry_key(op.name, op.variant_test_name): op for op in run_opinfo.load_op_db()}


def test_claimed_list_is_not_empty() -> None:
    assert len(CLAIMED) > 100, "tests/opinfo/claimed_ops.txt lost its entries"


@pytest.mark.parametrize("key", CLAIMED)
def test_claimed_opinfo_entry(key: str) -> None:
    op = _DB.get(key)
    assert op is not None, f"{key!r} is not an OpInfo entry of torch {torch.__version__}"
    res = run_opinfo.run_entry(op, torch.float32, SAMPLES, timeout=60.0)
    assert res.samples > 0, f"{key}: no sample input ran"
    assert res.status == "pass", f"{key}: {res.status}: {res.reason}"
