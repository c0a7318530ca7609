"""The compilation cache: a second process with the same TORCH_TPU_CACHE_DIR compiles nothing, concurrent
writers, corrupt/truncated/stale files, the size cap, and unusable directories (memory-only, one warning).

Every test runs its workload in fresh subprocesses with a cache directory of its own (tmp_path); the
results are compared against PyTorch CPU and, across processes, bit for bit.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import torch_tpu

# A small training step (linear layers, GELU, layer norm, cross entropy, backward, SGD with momentum) on odd sizes;
# prints the runtime counters as JSON and saves the tpu results and a CPU reference.
WORKLOAD = textwrap.dedent(
    """
    import json, sys, warnings
    warnings.simplefilter("default")
    import torch, torch_tpu
    torch.manual_seed(0)

    def step(device):
        torch.manual_seed(1)
        model = torch.nn.Sequential(torch.nn.Linear(13, 31), torch.nn.GELU(), torch.nn.LayerNorm(31),
                                    torch.nn.Linear(31, 7)).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        x = torch.randn(9, 13).to(device)
        y = (torch.arange(9) % 7).to(device)
        losses = []
        for _ in range(2):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        return [t.detach().cpu() for t in [*losses, *model.parameters()]]

    out = step("tpu")
    ref = step("cpu")
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))  # undo the full-disk test's limit to save results
    torch.save({"tpu": out, "cpu": ref}, sys.argv[1])
    m = torch_tpu.metrics()
    s = torch_tpu.cache.stats()
    print("METRICS " + json.dumps({"metrics": {k: v for k, v in m.items() if k != "fallback_counts"},
                                   "cache": s, "path": torch_tpu.cache.path()}))
    """
)

WARNING = "caching compiled executables in memory only"


def _env(cache_dir: str | os.PathLike[str], **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("TORCH_TPU_CPU_FALLBACK", None)
    env["TORCH_TPU_CACHE_DIR"] = str(cache_dir)
    env.pop("TORCH_TPU_CACHE_MAX_BYTES", None)
    env.update(extra)
    return env


def _start(out: Path, env: dict[str, str], preamble: str = "") -> subprocess.Popen[str]:
    code = preamble + WORKLOAD
    return subprocess.Popen([sys.executable, "-c", code, str(out)], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _finish(p: subprocess.Popen[str], out: Path) -> tuple[dict, list[torch.Tensor], str]:
    stdout, stderr = p.communicate(timeout=600)
    assert p.returncode == 0, f"workload failed ({p.returncode}):\n{stderr[-4000:]}"
    line = next(ln for ln in stdout.splitlines() if ln.startswith("METRICS "))
    info = json.loads(line[len("METRICS "):])
    res = torch.load(out)
    for t, r in zip(res["tpu"], res["cpu"]):
        torch.testing.assert_close(t, r, rtol=1e-4, atol=1e-5)  # the tpu run matches PyTorch CPU
    return info, res["tpu"], stderr


def _run(tmp_path: Path, name: str, env: dict[str, str], preamble: str = "") -> tuple[dict, list[torch.Tensor], str]:
    out = tmp_path / f"{name}.pt"
    return _finish(_start(out, env, preamble), out)


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


def _files(d: Path) -> list[Path]:
    return sorted(d.glob("*.tpc"))


def test_second_process_compiles_nothing(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cold, r1, _ = _run(tmp_path, "cold", _env(cache))
    m = cold["metrics"]
    assert cold["path"] == str(cache) and cold["cache"]["disk_enabled"]
    assert m["compiles"] > 0 and m["cache_disk_writes"] == m["compiles"]
    assert len(_files(cache)) == m["compiles"]
    warm, r2, _ = _run(tmp_path, "warm", _env(cache))
    w = warm["metrics"]
    assert w["compiles"] == 0, "the second process compiled"
    assert w["cache_hits_disk"] == m["compiles"] and w["cache_disk_rejected"] == 0
    assert w["cache_disk_writes"] == 0 and w["compile_seconds"] == 0
    assert _same(r1, r2), "results differ between the compiling and the loading process"


def test_compiled_mingpt_step_second_process_compiles_nothing(tmp_path: Path) -> None:
    """The compiled minGPT training step (benchmarks/bench_cold_compile.py's child: torch.compile of the model and
    of opt.step) in a second process on the same cache directory loads every executable, the eager ops around the
    compiled graphs included: also the sizes its first process made from a shape family's templates (a zero_ of
    one more parameter shape), which are written to disk like full compiles."""
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_cold_compile.py"
    env, runs = _env(tmp_path / "cache"), []
    for _ in range(2):
        r = subprocess.run([sys.executable, str(script), "--child", "mingpt", "tpu"], env=env, capture_output=True,
                           text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
    assert runs[0]["compiles"] > 0 and runs[0]["disk_hits"] == 0, runs[0]
    assert runs[1]["compiles"] == 0 and runs[1]["disk_hits"] == runs[0]["compiles"], runs[1]


def test_fused_eager_second_process_compiles_nothing(tmp_path: Path) -> None:
    """Fused-eager graphs (TORCH_TPU_FUSED_EAGER=1) are stored too: the second process running the same loop
    loads every fused graph and every single-op executable instead of compiling them."""
    cache = tmp_path / "cache"
    cold, r1, _ = _run(tmp_path, "cold", _env(cache, TORCH_TPU_FUSED_EAGER="1"))
    m = cold["metrics"]
    assert m["trace_flushes"] > 0 and m["trace_cache_misses"] > 0 and m["trace_fallbacks"] == 0, m
    assert m["compiles"] > 0 and m["cache_disk_writes"] == m["compiles"]
    warm, r2, _ = _run(tmp_path, "warm", _env(cache, TORCH_TPU_FUSED_EAGER="1"))
    w = warm["metrics"]
    assert w["compiles"] == 0, "the second process compiled"
    assert w["trace_flushes"] == m["trace_flushes"] and w["trace_cache_misses"] == m["trace_cache_misses"]
    assert w["cache_hits_disk"] == m["compiles"] and w["cache_disk_rejected"] == 0 and w["cache_disk_writes"] == 0
    assert _same(r1, r2), "results differ between the compiling and the loading process"
    strict, r3, _ = _run(tmp_path, "strict", _env(tmp_path / "strict-cache"))
    assert _same(r1, r3), "fused eager differs from strict eager"


# WORKLOAD's step with the model's forward/backward and AdamW's step under torch.compile(backend="tpu") (every graph
# captured); TPU_TEST_ACT=tanh changes one op of the forward graph.
COMPILED = textwrap.dedent(
    """
    import os
    if os.environ.get("TPU_TEST_NO_HINTS"):
        from torch_tpu import _compile
        _compile.META_HINTS = False
    _act = torch.nn.Tanh if os.environ.get("TPU_TEST_ACT") == "tanh" else torch.nn.GELU
    torch.nn.GELU = lambda: _act()

    def step(device):  # compiled on tpu, eager on cpu (the reference)
        torch.manual_seed(1)
        model = torch.nn.Sequential(torch.nn.Linear(13, 31), torch.nn.GELU(), torch.nn.LayerNorm(31),
                                    torch.nn.Linear(31, 7)).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=0.01, capturable=device == "tpu")
        fwd = torch.compile(model, backend="tpu") if device == "tpu" else model
        opt_step = torch.compile(opt.step, backend="tpu") if device == "tpu" else opt.step
        x = torch.randn(9, 13).to(device)
        y = (torch.arange(9) % 7).to(device)
        losses = []
        for _ in range(2):
            loss = torch.nn.functional.cross_entropy(fwd(x), y)
            opt.zero_grad()
            loss.backward()
            opt_step()
            losses.append(loss.detach())
        return [t.detach().cpu() for t in [*losses, *model.parameters()]]
    """
)


def test_compiled_second_process_compiles_nothing(tmp_path: Path) -> None:
    """torch.compile(backend="tpu"): a second process captures the same graphs from the disk cache (a capture walks
    the FX graph and loads the fused executables: no compile, results bit-identical); a process without meta hints
    (_compile.META_HINTS) computes the same bits; a changed graph misses."""
    cache = tmp_path / "cache"
    head, tail = WORKLOAD.split("out = step(")
    code = head + COMPILED + "\nout = step(" + tail

    def run(name: str, **extra: str):
        out = tmp_path / f"{name}.pt"
        p = subprocess.Popen([sys.executable, "-c", code, str(out)], env=_env(cache, **extra), text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        return _finish(p, out)

    cold, r1, _ = run("cold")
    m = cold["metrics"]
    assert m["compile_captures"] >= 3 and m["compile_capture_failures"] == {}, m
    assert m["compiles"] > 0 and m["cache_disk_writes"] == m["compiles"]
    warm, r2, _ = run("warm")
    w = warm["metrics"]
    assert w["compiles"] == 0 and w["compile_seconds"] == 0, "the second process compiled"
    assert w["compile_captures"] == m["compile_captures"] and w["compile_replays"] == m["compile_replays"]
    assert w["cache_hits_disk"] == m["compiles"] and w["cache_disk_rejected"] == 0 and w["cache_disk_writes"] == 0
    assert _same(r1, r2), "results differ between the compiling and the loading process"
    no_hints, r4, _ = run("no_hints", TORCH_TPU_CACHE_DIR="0", TPU_TEST_NO_HINTS="1")
    assert _same(r1, r4), "the captures' meta hints changed the results"
    changed, r3, _ = run("changed", TPU_TEST_ACT="tanh")
    c = changed["metrics"]
    assert c["compiles"] > 0 and c["cache_disk_writes"] == c["compiles"], "a changed graph ran a cached executable"
    assert not _same(r1, r3)


def test_two_processes_write_concurrently(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    procs = [(_start(tmp_path / f"p{i}.pt", _env(cache)), tmp_path / f"p{i}.pt") for i in range(2)]
    results = [_finish(p, out) for p, out in procs]
    assert _same(results[0][1], results[1][1])
    # every file the two wrote is whole: a third process loads all of them
    third, r3, _ = _run(tmp_path, "third", _env(cache))
    t = third["metrics"]
    assert t["compiles"] == 0 and t["cache_disk_rejected"] == 0 and t["cache_hits_disk"] > 0
    assert _same(results[0][1], r3)
    assert not list(cache.glob(".tmp.*")), "temporary files left behind"


@pytest.mark.parametrize("damage", ["corrupt", "truncated", "format_version", "library_build"])
def test_damaged_files_are_detected_and_replaced(tmp_path: Path, damage: str) -> None:
    cache = tmp_path / "cache"
    cold, r1, _ = _run(tmp_path, "cold", _env(cache))
    files = _files(cache)
    n = len(files)
    hit = files[: max(1, n // 3)]
    for f in hit:
        data = bytearray(f.read_bytes())
        if damage == "corrupt":  # one byte in the payload
            data[len(data) - len(data) // 4] ^= 0x10
        elif damage == "truncated":
            data = data[: len(data) // 2]
        elif damage == "format_version":  # header: magic[8], format_version u32
            data[8] ^= 0x7F
        else:  # header: ..., header_bytes u32, build u64 (a cache from another library build)
            data[16] ^= 0x01
        f.write_bytes(bytes(data))
    warm, r2, _ = _run(tmp_path, "warm", _env(cache))
    w = warm["metrics"]
    assert w["cache_disk_rejected"] == len(hit), "every damaged file is detected and counted"
    assert w["compiles"] == len(hit) and w["cache_hits_disk"] == n - len(hit)
    assert w["cache_disk_writes"] == len(hit)
    assert _same(r1, r2), "a damaged file changed the results"
    # the rewritten files are valid: the next process compiles nothing
    again, r3, _ = _run(tmp_path, "again", _env(cache))
    assert again["metrics"]["compiles"] == 0 and again["metrics"]["cache_disk_rejected"] == 0
    assert _same(r1, r3)


def test_size_cap_evicts_least_recently_used(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    full, _, _ = _run(tmp_path, "full", _env(cache / "uncapped"))
    total = sum(f.stat().st_size for f in _files(cache / "uncapped"))
    cap = total // 3
    capped, r1, _ = _run(tmp_path, "capped", _env(cache / "capped", TORCH_TPU_CACHE_MAX_BYTES=str(cap)))
    c = capped["metrics"]
    assert c["cache_disk_evictions"] > 0 and c["compiles"] == full["metrics"]["compiles"]
    kept = sum(f.stat().st_size for f in _files(cache / "capped"))
    assert 0 < kept <= cap
    assert capped["cache"]["disk_max_bytes"] == cap


def test_unusable_directory_is_memory_only_with_one_warning(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("not a directory")
    cases = {"regular file": str(not_a_dir), "file in the way": str(not_a_dir / "sub"),
             "read-only filesystem": "/proc/torch_tpu_cache_test"}
    for what, d in cases.items():
        info, _, stderr = _run(tmp_path, what.replace(" ", "_"), _env(d))
        assert stderr.count(WARNING) == 1, f"{what}: expected one warning, got:\n{stderr}"
        assert not info["cache"]["disk_enabled"] and info["path"] is None, what
        m = info["metrics"]
        assert m["compiles"] > 0 and m["cache_disk_writes"] == 0 and m["cache_hits_memory"] > 0, what


def test_unwritable_directory(tmp_path: Path) -> None:
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o500)
    try:
        if os.access(d, os.W_OK):
            pytest.skip("running as root: chmod 0500 does not stop writes (the read-only-filesystem case covers it)")
        info, _, stderr = _run(tmp_path, "ro", _env(d))
    finally:
        d.chmod(0o700)
    assert stderr.count(WARNING) == 1 and not info["cache"]["disk_enabled"]


def test_full_disk_degrades_with_one_warning(tmp_path: Path) -> None:
    # RLIMIT_FSIZE makes every write past 64 bytes fail with EFBIG, as a full disk fails with ENOSPC.
    preamble = textwrap.dedent(
        """
        import resource, signal
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (64, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
        """
    )
    cache = tmp_path / "cache"
    info, _, stderr = _run(tmp_path, "full", _env(cache), preamble)
    assert stderr.count(WARNING) == 1, stderr
    assert "File too large" in stderr or "No space" in stderr
    m = info["metrics"]
    assert not info["cache"]["disk_enabled"] and m["cache_disk_writes"] == 0 and m["cache_disk_errors"] == 1
    assert not _files(cache) and not list(cache.glob(".tmp.*"))


def test_disk_level_off() -> None:
    code = "import torch, torch_tpu; print(torch_tpu.cache.path(), torch_tpu.cache.stats()['disk_enabled'])"
    r = subprocess.run([sys.executable, "-c", code], env=_env("0"), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["None", "False"] and WARNING not in r.stderr


def test_invalid_max_bytes_raises_at_import(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-c", "import torch_tpu"], capture_output=True, text=True, timeout=300,
                       env=_env(tmp_path, TORCH_TPU_CACHE_MAX_BYTES="lots"))
    assert r.returncode != 0 and "TORCH_TPU_CACHE_MAX_BYTES='lots' is invalid" in r.stderr


def test_clear_and_stats_in_process() -> None:
    s = torch_tpu.cache.stats()
    assert set(s) >= {"disk_enabled", "memory_entries", "disk_hits", "disk_misses", "disk_writes", "disk_rejected",
                      "disk_evictions", "disk_errors", "disk_bytes", "disk_max_bytes"}
    assert torch_tpu.cache.path() == os.environ["TORCH_TPU_CACHE_DIR"]  # the test session's own directory
    x = torch.randn(5, 3)
    (x.to("tpu") * 3 - 1).cpu()
    assert torch_tpu.cache.stats()["memory_entries"] > 0
    torch_tpu.cache.clear()
    s = torch_tpu.cache.stats()
    assert s["memory_entries"] == 0 and s["disk_bytes"] == 0
    assert not list(Path(torch_tpu.cache.path()).glob("*.tpc"))
    before = torch_tpu.metrics()["compiles"]
    out = (x.to("tpu") * 3 - 1).cpu()  # compiled again: nothing cached anywhere
    assert torch_tpu.metrics()["compiles"] > before
    torch.testing.assert_close(out, x * 3 - 1)


# New sizes of eager ops (shape families, csrc/tpurt/cache/shape_family.h): ops over 2..23 rows, each size
# once, run with the size templates on and off (every size compiled in full); saves the results.
SIZES_WORKLOAD = textwrap.dedent(
    """
    import sys, torch, torch_tpu
    import torch.nn.functional as F
    torch.manual_seed(0)
    w = torch.randn(37, 6).to("tpu").requires_grad_()
    lin = torch.nn.Linear(6, 5).to("tpu")
    out = []
    for n in range(2, 24):
        g = torch.Generator().manual_seed(n)
        x = torch.randn(n, 6, generator=g).to("tpu").requires_grad_()
        ids = torch.randint(0, 37, (2 * n + 1,), generator=g).to("tpu")
        offs = torch.tensor([0, n // 2, n + 1]).to("tpu")
        psw = torch.rand(2 * n + 1, generator=g).to("tpu")
        bag = F.embedding_bag(ids, w, offs, mode="sum", per_sample_weights=psw)
        bagm = F.embedding_bag(ids, w, offs, mode="mean")
        y = (lin(x).softmax(-1).sum() + F.layer_norm(x, (6,)).var(0).sum() + x.mean(0).sum()
             + bag.square().sum() + bagm.sum() + torch.cat([x, x[: n // 2 + 1]]).logsumexp(0).sum())
        y.backward()
        out += [y.detach().cpu(), x.grad.cpu(), x.var(0, correction=1).detach().cpu(), x.cumsum(0).detach().cpu()]
    out += [w.grad.cpu(), lin.weight.grad.cpu()]
    torch.save(out, sys.argv[1])
    """
)


def test_new_sizes_from_templates_are_bit_identical(tmp_path: Path) -> None:
    """Eager ops at sizes made from a shape family's templates (no compiler passes) give the bits of a full
    compile of each size (TORCH_TPU_EAGER_TEMPLATES=0; its own cache directory, so nothing is loaded from the
    other run). Sizes made from the templates, each called once here, are not written to disk (they are at a
    second call: test_cache.c; a second process of the compiled minGPT step compiles nothing: the test above)."""
    res = {}
    for on in ("1", "0"):
        out = tmp_path / f"sizes{on}.pt"
        cache = tmp_path / f"cache{on}"
        p = subprocess.run([sys.executable, "-c", SIZES_WORKLOAD + textwrap.dedent(
            """
            import json; m = torch_tpu.metrics()
            print("METRICS " + json.dumps({"compiles": m["compiles"], "writes": m["cache_disk_writes"]}))
            """), str(out)], env=_env(cache, TORCH_TPU_EAGER_TEMPLATES=on), text=True, capture_output=True, timeout=600)
        assert p.returncode == 0, p.stderr[-4000:]
        line = next(ln for ln in p.stdout.splitlines() if ln.startswith("METRICS "))
        res[on] = (torch.load(out), json.loads(line[len("METRICS "):]))
    (a, ma), (b, mb) = res["1"], res["0"]
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape and torch.equal(x.view(-1).view(torch.int32), y.view(-1).view(torch.int32))
    assert ma["compiles"] == mb["compiles"] and mb["writes"] == mb["compiles"]
    assert ma["writes"] < ma["compiles"], "every size made from the templates was written to disk"
