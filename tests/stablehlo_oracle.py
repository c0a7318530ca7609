"""jax/XLA-on-CPU oracle for the StableHLO printer (tests/test_stablehlo.py).

While recording (``torch_tpu._C._debug_record_graphs``), every executable the host driver
runs is printed as StableHLO and recorded with copies of its inputs and outputs. This
module compiles each recorded module with jaxlib's XLA CPU client, runs it on the same
inputs and compares its outputs with the host driver's.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

import ml_dtypes
import numpy as np
import torch

import torch_tpu

_NP_DTYPES = {
    "float32": np.float32, "float64": np.float64, "float16": np.float16,
    "bfloat16": ml_dtypes.bfloat16, "int64": np.int64, "int32": np.int32, "int16": np.int16,
    "int8": np.int8, "uint8": np.uint8, "bool": np.bool_,
}

# Tolerances for floating outputs, relative to max(|expected|, 1) elementwise. The host and
# XLA compute the same ops in the same dtypes, but (a) transcendental functions are different
# polynomial approximations (a few ulp apart), (b) reductions and dots sum in different orders,
# (c) bf16/f16 results are computed in f32 and rounded once on both sides, so a tiny f32
# difference may round to the neighbouring bf16/f16 value: one ulp of the narrow type.
_TOL = {
    "float32": 2e-5,
    "float64": 1e-12,
    "float16": 2.0 ** -10 * 1.01,
    "bfloat16": 2.0 ** -7 * 1.01,
}

_compiled: dict[str, Any] = {}


def _backend():
    from jax._src import xla_bridge
    return xla_bridge.get_backend("cpu")


def _compile(text: str):
    exe = _compiled.get(text)
    if exe is None:
        from jax._src.interpreters import mlir
        from jax._src.lib import xla_client as xc
        from jax._src.lib.mlir import ir
        be = _backend()
        with mlir.make_ir_context():
            module = ir.Module.parse(text)
            exe = be.compile_and_load(module, executable_devices=xc.DeviceList((be.devices()[0],)),
                                      compile_options=xc.CompileOptions())
        _compiled[text] = exe
    return exe


def _array(entry) -> np.ndarray | None:
    dtype, shape, data = entry
    if data is None:
        return None
    return np.frombuffer(data, dtype=_NP_DTYPES[dtype]).reshape(shape).copy()


def run_module(text: str, args: list[np.ndarray]) -> list[np.ndarray]:
    import jax
    jax.config.update("jax_enable_x64", True)  # else device_put narrows f64/i64 arguments
    exe = _compile(text)
    dev = _backend().devices()[0]
    outs = exe.execute([jax.device_put(a, dev) for a in args])
    return [np.asarray(o) for o in outs]


@contextlib.contextmanager
def recorded() -> Iterator[list[dict]]:
    """Records every graph the host driver runs inside the block (list filled at exit)."""
    torch.tpu.synchronize()
    torch_tpu._C._debug_take_graphs()
    records: list[dict] = []
    torch_tpu._C._debug_record_graphs(True)
    try:
        yield records
    finally:
        torch.tpu.synchronize()
        torch_tpu._C._debug_record_graphs(False)
        records.extend(torch_tpu._C._debug_take_graphs())


def _compare(op: str, k: int, dtype: str, got: np.ndarray, want: np.ndarray) -> str | None:
    if got.shape != want.shape:
        return f"{op}: output {k} shape {got.shape} != {want.shape}"
    if dtype not in _TOL:
        if not np.array_equal(got, want):
            bad = np.argwhere(got != want)[:5].tolist()
            return f"{op}: output {k} ({dtype}) differs at {bad}: xla {got[tuple(np.array(bad).T)]} host {want[tuple(np.array(bad).T)]}"
        return None
    g = got.astype(np.float64)
    w = want.astype(np.float64)
    nan_g, nan_w = np.isnan(g), np.isnan(w)
    if not np.array_equal(nan_g, nan_w):
        return f"{op}: output {k} NaN positions differ (xla {int(nan_g.sum())}, host {int(nan_w.sum())})"
    fin = ~nan_w
    inf_ok = np.array_equal(np.isinf(g[fin]) * np.sign(g[fin]), np.isinf(w[fin]) * np.sign(w[fin]))
    if not inf_ok:
        return f"{op}: output {k} infinities differ"
    m = fin & ~np.isinf(w)
    err = np.abs(g[m] - w[m]) / np.maximum(np.abs(w[m]), 1.0)
    if err.size and err.max() > _TOL[dtype]:
        i = int(err.argmax())
        return f"{op}: output {k} ({dtype}) rel. error {err.max():.3g} > {_TOL[dtype]:.3g} (xla {g[m][i]!r}, host {w[m][i]!r})"
    return None


# Printer errors tolerated with allow_gaps (docs/stablehlo.md "Known gaps"): the custom targets
# no lowering emits. Every graph the examples run today is printable, so nothing is skipped.
KNOWN_GAPS = ("stablehlo: custom_call target",)


def check_records(records: list[dict], min_graphs: int = 1, allow_gaps: bool = False) -> dict:
    """Runs each recorded module with XLA and compares; raises AssertionError listing every mismatch.
    allow_gaps: graphs the printer reports as a known gap are counted, not failed.
    Returns {"checked": n, "gaps": n, "ops": sorted op names checked}."""
    assert len(records) >= min_graphs, f"expected at least {min_graphs} recorded graphs, got {len(records)}"
    problems: list[str] = []
    gaps = 0
    ops: set[str] = set()
    for r in records:
        if r["text"] is None:
            if allow_gaps and r["error"] and r["error"].startswith(KNOWN_GAPS):
                gaps += 1
                continue
            problems.append(f"{r['op']}: not printable: {r['error']}")
            continue
        ops.add(r["op"])
        if r["error"] is not None:
            problems.append(f"{r['op']}: the host run failed: {r['error']}")
            continue
        args = [_array(e) for e in r["params"]] + [_array(e) for e in r["scalars"]]
        try:
            outs = run_module(r["text"], args)
        except Exception as e:  # the module text failed to parse/compile/run in XLA
            problems.append(f"{r['op']}: XLA rejected the module: {str(e)[:2000]}\n{r['text'][:4000]}")
            continue
        for k, (entry, got) in enumerate(zip(r["outputs"], outs)):
            want = _array(entry)
            if want is None:
                continue
            msg = _compare(r["op"], k, entry[0], got, want)
            if msg:
                problems.append(msg)
    assert not problems, "\n".join(problems)
    return {"checked": len(records) - gaps, "gaps": gaps, "ops": sorted(ops)}
