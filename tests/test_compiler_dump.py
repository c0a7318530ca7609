"""The compiler's diagnostics: TORCH_TPU_DUMP_IR files (in a subprocess, since the variable is read at
the first compile) and the compiler counters in torch_tpu.metrics()."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import torch

import torch_tpu

_SCRIPT = textwrap.dedent(
    """
    import torch, torch_tpu
    torch.manual_seed(0)
    x = torch.randn(5, 7)
    w = torch.randn(7, 3)
    y = (torch.nn.functional.gelu(x.to("tpu") @ w.to("tpu")) * 0.5).sum(1)
    ref = (torch.nn.functional.gelu(x @ w) * 0.5).sum(1)
    torch.testing.assert_close(y.cpu(), ref)
    print("OK", torch_tpu.metrics()["compiles"])
    """
)


def _run(env_dir: str) -> subprocess.CompletedProcess:
    # no disk cache: every executable is compiled (and dumped) in the subprocess
    env = dict(os.environ, TORCH_TPU_DUMP_IR=env_dir, TORCH_TPU_CACHE_DIR="0")
    return subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, timeout=300)


def test_dump_ir_writes_before_after_and_stablehlo(tmp_path: Path) -> None:
    out = tmp_path / "dump"
    r = _run(str(out))
    assert r.returncode == 0, r.stderr
    assert "OK" in r.stdout
    files = sorted(p.name for p in out.iterdir())
    before = [f for f in files if f.endswith(".before.txt")]
    after = [f for f in files if f.endswith(".after.txt")]
    hlo = [f for f in files if f.endswith(".stablehlo.mlir")]
    assert before and len(before) == len(after) == len(hlo), files
    # one set per compile, named <seq>_<op>
    assert any("aten__mm" in f or "aten__matmul" in f or "mm" in f for f in before), files
    for f in before + after:
        text = (out / f).read_text()
        assert "return(" in text and "parameter(" in text, (f, text)
    for f in hlo:
        text = (out / f).read_text()
        assert "func.func" in text or text.startswith("// not expressible in StableHLO"), (f, text)
    assert any("stablehlo." in (out / f).read_text() for f in hlo)


def test_dump_ir_unwritable_dir_warns_once_and_ops_still_run(tmp_path: Path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    r = _run(str(blocker / "dump"))
    assert r.returncode == 0, r.stderr
    assert "OK" in r.stdout
    assert r.stderr.count("TORCH_TPU_DUMP_IR") == 1, r.stderr


def test_compiler_metrics_counted() -> None:
    torch_tpu.reset_metrics()
    x = torch.randn(33, 17)
    t = x.to("tpu")
    # softmax + layer_norm + an elementwise chain: multi-op graphs with fusion
    got = torch.nn.functional.layer_norm(torch.softmax(t, 1) * 2 + 1, (17,))
    ref = torch.nn.functional.layer_norm(torch.softmax(x, 1) * 2 + 1, (17,))
    torch.testing.assert_close(got.cpu(), ref)
    m = torch_tpu.metrics()
    for k in ("graph_ops_before", "graph_ops_after", "pass_canon_rewrites", "pass_folds", "pass_cse_hits",
              "pass_dce_removed", "fusion_clusters", "fusion_ops_fused", "fusion_reduce_producers"):
        assert isinstance(m[k], int) and m[k] >= 0, k
    if m["compiles"] > 0:
        assert 0 < m["graph_ops_after"] <= m["graph_ops_before"]
        assert m["graph_ops_before"] - m["graph_ops_after"] <= (
            m["pass_canon_rewrites"] + m["pass_folds"] + m["pass_cse_hits"] + m["pass_dce_removed"])
