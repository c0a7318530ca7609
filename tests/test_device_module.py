"""torch.tpu behaves like torch.cuda: types, values, errors, memory stats, RNG, streams, accelerator."""
from __future__ import annotations

import collections
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_tpu

MiB = 1024 * 1024


def _bad_ids() -> list[object]:
    n = torch.tpu.device_count()
    return [n, n + 7, f"tpu:{n}", torch.device("tpu", n)]


# ---------------------------------------------------------------- registration


def test_registered_as_torch_tpu() -> None:
    assert torch.tpu is torch_tpu.tpu
    assert sys.modules["torch.tpu"] is torch_tpu.tpu
    assert torch._C._get_privateuse1_backend_name() == "tpu"
    assert torch.get_device_module("tpu") is torch.tpu
    assert torch.device("tpu:0").type == "tpu"
    assert hasattr(torch.Tensor, "tpu") and hasattr(torch.Tensor, "is_tpu")
    assert hasattr(torch.nn.Module, "tpu")
    assert hasattr(torch.UntypedStorage, "tpu")


def test_version() -> None:
    assert isinstance(torch_tpu.__version__, str) and torch_tpu.__version__


# ---------------------------------------------------------------- devices


def test_availability() -> None:
    assert torch.tpu.is_available() is True
    count = torch.tpu.device_count()
    assert isinstance(count, int) and count >= 1
    assert torch.tpu.is_initialized() is True
    assert torch.tpu._is_in_bad_fork() is False
    torch.tpu.init()
    torch.tpu._lazy_init()


def test_current_and_set_device() -> None:
    assert torch.tpu.current_device() == 0
    assert isinstance(torch.tpu.current_device(), int)
    for arg in (0, "tpu:0", torch.device("tpu", 0), "tpu"):
        torch.tpu.set_device(arg)
        assert torch.tpu.current_device() == 0
    torch.tpu.set_device(-1)  # a no-op, as in torch.cuda
    assert torch.tpu.current_device() == 0


@pytest.mark.parametrize("bad", _bad_ids(), ids=str)
def test_invalid_device_ids(bad: object) -> None:
    for fn in (
        torch.tpu.set_device,
        torch.tpu.synchronize,
        torch.tpu.get_device_properties,
        torch.tpu.get_device_name,
        torch.tpu.memory_allocated,
        torch.tpu.memory_stats,
        torch.tpu.reset_peak_memory_stats,
        torch.tpu.mem_get_info,
        torch.tpu.current_stream,
        torch.tpu.get_rng_state,
    ):
        with pytest.raises(RuntimeError, match="Invalid device id"):
            fn(bad)
    with pytest.raises(RuntimeError, match="Invalid device id"):
        with torch.tpu.device(bad):
            pass
    assert torch.tpu.current_device() == 0


def test_wrong_device_type() -> None:
    with pytest.raises(ValueError, match="Expected a tpu device"):
        torch.tpu.synchronize("cpu")
    with pytest.raises(ValueError, match="Expected a tpu device"):
        torch.tpu.memory_allocated(torch.device("cpu"))
    with pytest.raises(TypeError):
        torch.tpu.synchronize(1.5)  # type: ignore[arg-type]


def test_device_context_manager() -> None:
    with torch.tpu.device(0):
        assert torch.tpu.current_device() == 0
    with torch.tpu.device("tpu:0"):
        assert torch.tpu.current_device() == 0
    for noop in (None, -1):
        with torch.tpu.device(noop):
            assert torch.tpu.current_device() == 0
    x = torch.empty(4, device="tpu")
    with torch.tpu.device_of(x):
        assert torch.tpu.current_device() == x.get_device() == 0
    with torch.tpu.device_of(torch.empty(4)):  # a CPU tensor: no-op
        assert torch.tpu.current_device() == 0


def test_synchronize() -> None:
    x = torch.ones(1024, device="tpu")
    y = x * 2
    assert torch.tpu.synchronize() is None
    torch.tpu.synchronize(0)
    torch.tpu.synchronize("tpu:0")
    torch.tpu.synchronize(torch.device("tpu"))
    assert y.cpu().sum().item() == 2048


def test_device_properties() -> None:
    props = torch.tpu.get_device_properties(0)
    assert props == torch.tpu.get_device_properties()
    assert props.driver == "host"
    assert "TPU" in props.name and "host" in props.name
    assert torch.tpu.get_device_name() == props.name == torch.tpu.get_device_name("tpu:0")
    assert props.total_memory == torch.tpu.memory_stats()["capacity_bytes"] > 0
    assert isinstance(props.cpu_features, str)
    assert props.num_threads >= 1
    assert isinstance(props.launch_blocking, bool)
    assert "TPU" in repr(props)
    cap = torch.tpu.get_device_capability()
    assert isinstance(cap, tuple) and len(cap) == 2 and all(isinstance(v, int) for v in cap)


def test_amp_support() -> None:
    assert torch.tpu.get_amp_supported_dtype() == [torch.bfloat16, torch.float16]
    assert torch.tpu.is_bf16_supported() is True
    with torch.autocast("tpu", dtype=torch.bfloat16):
        assert torch.is_autocast_enabled("tpu")
        assert torch.get_autocast_dtype("tpu") == torch.bfloat16
    assert not torch.is_autocast_enabled("tpu")


def test_autocast_runs_ops_in_bf16() -> None:
    lin = torch.nn.Linear(8, 4).to("tpu")
    x = torch.randn(2, 8).to("tpu")
    with torch.autocast("tpu", dtype=torch.bfloat16):
        y = lin(x)
    assert y.dtype == torch.bfloat16
    ref = torch.nn.functional.linear(x.cpu().bfloat16(), lin.weight.cpu().bfloat16(), lin.bias.cpu().bfloat16())
    torch.testing.assert_close(y.cpu(), ref)


def test_tensor_and_module_methods() -> None:
    x = torch.arange(6, dtype=torch.float32).tpu()
    assert x.is_tpu and x.device == torch.device("tpu:0")
    assert not torch.ones(1).is_tpu
    m = torch.nn.Linear(3, 2).tpu()
    assert all(p.device.type == "tpu" for p in m.parameters())
    assert x.cpu().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


# ---------------------------------------------------------------- memory


def test_memory_stats_keys_and_types() -> None:
    stats = torch.tpu.memory_stats()
    assert isinstance(stats, collections.OrderedDict)
    assert list(stats) == sorted(stats)
    for key in (
        "allocated_bytes.all.current",
        "allocated_bytes.all.peak",
        "reserved_bytes.all.current",
        "reserved_bytes.all.peak",
        "requested_bytes.all.current",
        "allocation.all.allocated",
        "allocation.all.freed",
        "allocation.all.current",
        "num_ooms",
        "capacity_bytes",
    ):
        assert isinstance(stats[key], int) and stats[key] >= 0, key
    assert stats["allocated_bytes.all.current"] == torch.tpu.memory_allocated()
    assert stats["reserved_bytes.all.current"] == torch.tpu.memory_reserved()
    assert torch.tpu.memory_stats("tpu:0") == torch.tpu.memory_stats(torch.device("tpu", 0))


def test_memory_moves_with_tensors() -> None:
    torch.tpu.synchronize()
    base_alloc = torch.tpu.memory_allocated()
    base_count = torch.tpu.memory_stats()["allocation.all.current"]
    x = torch.empty(4 * MiB // 4, dtype=torch.float32, device="tpu")  # 4 MiB
    assert torch.tpu.memory_allocated() >= base_alloc + 4 * MiB
    assert torch.tpu.memory_stats()["requested_bytes.all.current"] >= 4 * MiB
    assert torch.tpu.memory_stats()["allocation.all.current"] == base_count + 1
    assert torch.tpu.memory_reserved() >= torch.tpu.memory_allocated()
    assert torch.tpu.max_memory_allocated() >= torch.tpu.memory_allocated()
    del x
    torch.tpu.synchronize()
    assert torch.tpu.memory_allocated() == base_alloc
    assert torch.tpu.memory_stats()["allocation.all.current"] == base_count


def test_peak_reset() -> None:
    torch.tpu.synchronize()
    x = torch.empty(8 * MiB, dtype=torch.uint8, device="tpu")
    del x
    torch.tpu.synchronize()
    assert torch.tpu.max_memory_allocated() >= torch.tpu.memory_allocated() + 8 * MiB
    torch.tpu.reset_peak_memory_stats()
    assert torch.tpu.max_memory_allocated() == torch.tpu.memory_allocated()
    assert torch.tpu.max_memory_reserved() == torch.tpu.memory_reserved()
    y = torch.empty(2 * MiB, dtype=torch.uint8, device="tpu")
    assert torch.tpu.max_memory_allocated() >= torch.tpu.memory_allocated() >= 2 * MiB
    del y
    with pytest.warns(FutureWarning):
        torch.tpu.reset_max_memory_allocated()
    assert torch.tpu.max_memory_allocated() == torch.tpu.memory_allocated()


def test_empty_cache_returns_cached_blocks() -> None:
    x = torch.empty(4 * MiB, dtype=torch.uint8, device="tpu")
    del x
    torch.tpu.synchronize()
    assert torch.tpu.memory_reserved() >= torch.tpu.memory_allocated()
    torch.tpu.empty_cache()
    assert torch.tpu.memory_reserved() == torch.tpu.memory_allocated()


def test_cached_block_is_reused() -> None:
    x = torch.empty(3 * MiB, dtype=torch.uint8, device="tpu")
    del x
    torch.tpu.synchronize()
    hits = torch.tpu.memory_stats()["num_cache_hits"]
    reserved = torch.tpu.memory_reserved()
    y = torch.empty(3 * MiB, dtype=torch.uint8, device="tpu")
    assert torch.tpu.memory_stats()["num_cache_hits"] == hits + 1
    assert torch.tpu.memory_reserved() == reserved
    del y


def test_mem_get_info() -> None:
    free, total = torch.tpu.mem_get_info()
    assert isinstance(free, int) and isinstance(total, int)
    assert total == torch.tpu.get_device_properties().total_memory
    assert free == total - torch.tpu.memory_reserved()


def test_out_of_memory_is_counted_and_recoverable() -> None:
    ooms = torch.tpu.memory_stats()["num_ooms"]
    capacity = torch.tpu.get_device_properties().total_memory
    with pytest.raises(torch.OutOfMemoryError):
        torch.empty(capacity + MiB, dtype=torch.uint8, device="tpu")
    assert torch.tpu.memory_stats()["num_ooms"] == ooms + 1
    assert torch.ones(3, device="tpu").cpu().tolist() == [1.0, 1.0, 1.0]


def test_memory_summary() -> None:
    summary = torch.tpu.memory_summary()
    assert isinstance(summary, str)
    assert "device ID 0" in summary and "Allocated memory" in summary and "Capacity" in summary
    assert "Out-of-memory" not in torch.tpu.memory_summary(abbreviated=True)


# ---------------------------------------------------------------- random


def test_default_generators() -> None:
    gens = torch.tpu.default_generators
    assert isinstance(gens, tuple) and len(gens) == torch.tpu.device_count()
    for i, g in enumerate(gens):
        assert isinstance(g, torch.Generator)
        assert g.device == torch.device("tpu", i)


def test_manual_seed_reproducible() -> None:
    torch.tpu.manual_seed(1234)
    assert torch.tpu.initial_seed() == 1234
    a = torch.randn(64, device="tpu").cpu()
    b = torch.randn(64, device="tpu").cpu()
    torch.tpu.manual_seed(1234)
    a2 = torch.randn(64, device="tpu").cpu()
    assert torch.equal(a, a2)
    assert not torch.equal(a, b)
    torch.tpu.manual_seed(4321)
    assert not torch.equal(a, torch.randn(64, device="tpu").cpu())


def test_torch_manual_seed_reaches_tpu() -> None:
    torch.manual_seed(77)
    assert torch.tpu.initial_seed() == 77
    a = torch.randn(16, device="tpu").cpu()
    torch.manual_seed(77)
    assert torch.equal(a, torch.randn(16, device="tpu").cpu())
    torch.tpu.manual_seed_all(78)
    assert all(g.initial_seed() == 78 for g in torch.tpu.default_generators)


def test_seed_and_seed_all() -> None:
    torch.tpu.manual_seed(5)
    torch.tpu.seed()
    assert isinstance(torch.tpu.initial_seed(), int)
    torch.tpu.seed_all()
    seeds = {g.initial_seed() for g in torch.tpu.default_generators}
    assert len(seeds) == 1


def test_rng_state_roundtrip() -> None:
    torch.tpu.manual_seed(99)
    state = torch.tpu.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    a = torch.rand(32, device="tpu").cpu()
    torch.tpu.set_rng_state(state)
    assert torch.equal(a, torch.rand(32, device="tpu").cpu())
    states = torch.tpu.get_rng_state_all()
    assert len(states) == torch.tpu.device_count()
    torch.tpu.set_rng_state_all(states)
    torch.tpu.set_rng_state(state, "tpu:0")
    assert torch.equal(a, torch.rand(32, device="tpu").cpu())


def test_fork_rng() -> None:
    torch.tpu.manual_seed(3)
    with torch.random.fork_rng(device_type="tpu"):
        a = torch.randn(8, device="tpu").cpu()
    assert torch.equal(a, torch.randn(8, device="tpu").cpu())


# ---------------------------------------------------------------- streams and events


def test_streams() -> None:
    s = torch.tpu.Stream()
    assert isinstance(s, torch.Stream) and isinstance(s, torch.tpu.Stream)
    assert s.device == torch.device("tpu", 0)
    assert torch.tpu.Stream("tpu:0").device_index == 0
    cur = torch.tpu.current_stream()
    assert isinstance(cur, torch.tpu.Stream) and cur.device.type == "tpu"
    default = torch.tpu.default_stream()
    assert default.stream_id == 0 and default.device == torch.device("tpu", 0)
    with torch.tpu.stream(s):
        assert torch.tpu.current_stream() == s
        y = torch.ones(8, device="tpu") + 1
    assert torch.tpu.current_stream() == cur
    with torch.tpu.stream(None):
        assert torch.tpu.current_stream() == cur
    s.synchronize()
    assert s.query() is True
    torch.tpu.set_stream(s)
    assert torch.tpu.current_stream() == s
    torch.tpu.set_stream(cur)
    assert torch.tpu.current_stream() == cur
    with s:  # torch.Stream's own context manager
        assert torch.tpu.current_stream() == s
    assert y.cpu().tolist() == [2.0] * 8
    s.wait_stream(cur)


def test_events() -> None:
    start = torch.tpu.Event(enable_timing=True)
    end = torch.tpu.Event(enable_timing=True)
    assert isinstance(start, torch.tpu.Event) and isinstance(start, torch.Event)
    assert start.device.type == "tpu"
    start.record()
    x = torch.ones(256, 256, device="tpu")
    y = x * 2 + 1
    end.record()
    end.synchronize()
    assert end.query() is True
    assert start.device == torch.device("tpu", 0)
    assert start.elapsed_time(end) >= 0.0
    s = torch.tpu.Stream()
    ev = s.record_event()
    ev.wait(torch.tpu.current_stream())
    ev.synchronize()
    e2 = torch.Event(device="tpu")
    e2.record(torch.tpu.current_stream())
    e2.wait()
    torch.tpu.synchronize()
    assert y.cpu()[0, 0].item() == 3.0


# ---------------------------------------------------------------- torch.accelerator


def test_torch_accelerator() -> None:
    assert torch.accelerator.current_accelerator() == torch.device("tpu")
    assert torch.accelerator.current_accelerator(check_available=True) == torch.device("tpu")
    assert torch.accelerator.is_available() is True
    assert torch.accelerator.device_count() == torch.tpu.device_count()
    assert torch.accelerator.current_device_index() == 0
    torch.accelerator.set_device_index(0)
    torch.accelerator.synchronize()
    torch.accelerator.synchronize("tpu:0")
    s = torch.accelerator.current_stream()
    assert s.device.type == "tpu"
    with torch.accelerator.device_index(0):
        assert torch.tpu.current_device() == 0


def test_torch_accelerator_memory() -> None:
    x = torch.empty(MiB, dtype=torch.uint8, device="tpu")
    assert torch.accelerator.memory_allocated(0) == torch.tpu.memory_allocated(0)
    assert torch.accelerator.memory_reserved(0) == torch.tpu.memory_reserved(0)
    del x


# ---------------------------------------------------------------- metrics


def test_metrics() -> None:
    torch_tpu.reset_metrics()
    m = torch_tpu.metrics()
    for key in ("ops_run", "exec_cache_hits", "exec_cache_misses", "compiles", "exec_cache_entries",
                "kernels_launched", "fallback_ops"):
        assert isinstance(m[key], int), key
    assert isinstance(m["compile_seconds"], float)
    assert isinstance(m["fallback_counts"], dict)
    assert m["ops_run"] == 0 and m["fallback_ops"] == 0
    x = torch.ones(16, device="tpu")
    (x + x).cpu()
    m = torch_tpu.metrics()
    assert m["ops_run"] >= 1
    assert m["exec_cache_hits"] + m["exec_cache_misses"] >= 1
    assert torch_tpu.cpu_fallback_enabled() is False


# ---------------------------------------------------------------- processes


def test_forked_child_is_in_bad_fork() -> None:
    pid = os.fork()
    if pid == 0:  # child: must not touch the runtime
        ok = torch.tpu._is_in_bad_fork() and not torch.tpu.is_initialized()
        try:
            torch.tpu.synchronize()
            ok = False
        except RuntimeError as exc:
            ok = ok and "forked subprocess" in str(exc)
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert torch.tpu._is_in_bad_fork() is False


_TWO_DEVICES = textwrap.dedent(
    """
    import torch, pytest
    assert torch.tpu.device_count() == 2
    assert torch.accelerator.device_count() == 2
    torch.tpu.set_device(1)
    assert torch.tpu.current_device() == 1
    assert torch.accelerator.current_device_index() == 1
    x = torch.empty(1 << 20, dtype=torch.uint8, device="tpu")
    assert x.device == torch.device("tpu", 1)
    assert torch.tpu.memory_allocated(1) >= 1 << 20
    assert torch.tpu.memory_allocated(0) == 0
    with torch.tpu.device(0):
        assert torch.tpu.current_device() == 0
        assert torch.empty(4, device="tpu").device.index == 0
    assert torch.tpu.current_device() == 1
    with torch.tpu.device_of(torch.empty(4, device="tpu:0")):
        assert torch.tpu.current_device() == 0
    assert torch.tpu.current_device() == 1
    torch.tpu.set_device("tpu:0")
    s1 = torch.tpu.Stream("tpu:1")
    assert s1.device == torch.device("tpu", 1)
    with torch.tpu.stream(s1):
        assert torch.tpu.current_stream(1) == s1
    assert torch.tpu.current_device() == 0
    assert torch.tpu.current_stream(1) == torch.tpu.default_stream(1)
    torch.tpu.synchronize(1)
    torch.tpu.manual_seed_all(11)
    assert [g.initial_seed() for g in torch.tpu.default_generators] == [11, 11]
    assert len(torch.tpu.get_rng_state_all()) == 2
    with pytest.raises(RuntimeError, match="Invalid device id"):
        torch.tpu.set_device(2)
    with pytest.raises(RuntimeError, match="Invalid device id"):
        torch.tpu.memory_stats("tpu:2")
    print("OK")
    """
)


def test_two_devices() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_TPU_")}
    env["TORCH_TPU_NUM_DEVICES"] = "2"
    proc = subprocess.run([sys.executable, "-c", _TWO_DEVICES], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("OK")
