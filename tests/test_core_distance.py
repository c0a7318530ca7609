"""The core-distance probe (torch_tpu._C._core_distance, runtime/cpu_distance.c) and the benchmarks' use of it
(benchmarks/common.py): a sane record or None, never a crash; no timings asserted (types and ranges only)."""
from __future__ import annotations

import importlib.util
import math
import os
import time

import pytest
import torch_tpu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _bench_common():
    spec = importlib.util.spec_from_file_location("bench_common_t", os.path.join(ROOT, "benchmarks", "common.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _check(r) -> None:
    if r is None:  # one CPU, no affinity permission, or CPUs too busy to answer in time
        return
    assert set(r) == {"rtt_ns", "rtt_p10_ns", "rtt_cycles", "cpus", "trips"}
    assert isinstance(r["rtt_ns"], float) and isinstance(r["rtt_p10_ns"], float)
    assert 0.0 < r["rtt_p10_ns"] <= r["rtt_ns"]  # no upper bound: a preempted trip is timed at any length
    assert isinstance(r["rtt_cycles"], float) and r["rtt_cycles"] >= 0.0
    a, b = r["cpus"]
    assert a < b and {a, b} <= os.sched_getaffinity(0)
    assert isinstance(r["trips"], int) and 100 <= r["trips"] <= 1000


def test_probe_record_or_none() -> None:
    before = os.sched_getaffinity(0)
    for _ in range(3):
        _check(torch_tpu._C._core_distance())
    assert os.sched_getaffinity(0) == before  # the caller's affinity is left alone
    if len(before) < 2:
        assert torch_tpu._C._core_distance() is None


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no sched_setaffinity")
def test_probe_one_cpu_is_none() -> None:
    allowed = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {min(allowed)})  # as on a 1-CPU machine (pid 0: this thread)
        assert torch_tpu._C._core_distance() is None
    finally:
        os.sched_setaffinity(0, allowed)


def test_bench_common_modes(monkeypatch) -> None:
    bc = _bench_common()
    assert bc.core_mode() in ("near", "far", "?")
    assert bc.combine_modes("near", "near") == "near"
    assert bc.combine_modes("far", "near") == "mixed"
    assert bc.combine_modes("far", "?", "far") == "far"
    assert bc.combine_modes("?", "?") == "?"
    monkeypatch.setenv("TORCH_TPU_BENCH_MODE_PERIOD_S", "0.01")
    with bc.ModeMonitor() as mon:
        with bc.ModeMonitor() as inner:  # nested: the outer one probes
            pass
        assert bc.bench(lambda: None, "cpu", warmup=0, repeat=1) >= 0.0 and bc.LAST_MODE == "?"
        deadline = time.monotonic() + 30.0  # the watcher thread probes during the round (a liveness check)
        while len(mon.samples) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        during = len(mon.samples)
    assert inner.samples == [] and inner.mode == "?"
    assert during >= 2 and len(mon.samples) > during and set(mon.samples) <= {"near", "far", "?"}
    assert mon.mode in bc.MODES
    assert math.isnan(mon.far_share) or 0.0 <= mon.far_share <= 1.0
    monkeypatch.setenv("TORCH_TPU_BENCH_MODE_PERIOD_S", "-1")
    with pytest.raises(ValueError, match="TORCH_TPU_BENCH_MODE_PERIOD_S"):
        bc.ModeMonitor().__enter__()
    assert bc.ModeMonitor._active == 0
    cpus, tpus, modes = [1.0, 1.0, 1.0, 1.0], [1.0, 2.0, 4.0, 1.0], ["near", "far", "far", "mixed"]
    monkeypatch.delenv("TORCH_TPU_BENCH_MODE", raising=False)
    c, t, r, text = bc.summary(cpus, tpus, modes, speed=True)
    assert (c, t, r) == (1.0, 1.5, 0.75)
    assert "modes NFFM: near 1 1.00x, far 2 0.38x, mixed 1 1.00x" in text
    monkeypatch.setenv("TORCH_TPU_BENCH_MODE", "far")
    c, t, r, text = bc.summary(cpus, tpus, modes, speed=True)
    assert (c, t, r) == (1.0, 3.0, 0.375) and "ratio from the 2 far rounds" in text
    monkeypatch.setenv("TORCH_TPU_BENCH_MODE", "near")
    assert math.isnan(bc.summary(cpus, tpus, ["far"] * 4)[2])  # no near round
    monkeypatch.setenv("TORCH_TPU_BENCH_MODE", "nearby")
    with pytest.raises(ValueError, match="TORCH_TPU_BENCH_MODE"):
        bc.wanted_mode()
    # the bounded wait returns a mode even when the wanted one never comes
    monkeypatch.setenv("TORCH_TPU_BENCH_MODE", "far")
    monkeypatch.setenv("TORCH_TPU_BENCH_MODE_WAIT_S", "0")
    assert bc.wait_for_mode() in ("near", "far", "?")
    assert math.isnan(bc.summary([1.0], [1.0], ["near"])[2])
