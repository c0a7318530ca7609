"""Meta kernels for aten::convolution_overrideable and aten::convolution_backward_overrideable.

A backend other than CPU/CUDA reaches convolutions through these two ops, whose default kernels
throw, so the glue could not learn the output shapes from PyTorch's meta functions. These reuse
aten::convolution / aten::convolution_backward's meta functions (shapes and PyTorch's error
messages) and pick the memory format as PyTorch's CPU backend does: channels_last(_3d) outputs
when the input or the weight is channels_last.
"""
from __future__ import annotations

import torch

_lib: torch.library.Library | None = None


def _channels_last(t: torch.Tensor) -> torch.memory_format | None:
    if t.dim() == 4:
        fmt = torch.channels_last
    elif t.dim() == 5:
        fmt = torch.channels_last_3d
    else:
        return None
    if t.is_contiguous(memory_format=fmt) and not t.is_contiguous():
        return fmt
    return None


def _format(inp: torch.Tensor, weight: torch.Tensor) -> torch.memory_format:
    return _channels_last(inp) or _channels_last(weight) or torch.contiguous_format


def _restride(t: torch.Tensor | None, fmt: torch.memory_format) -> torch.Tensor | None:
    if t is None:
        return None
    return torch.empty(t.shape, dtype=t.dtype, device="meta", memory_format=fmt)


def _conv_meta(inp, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    out = torch.ops.aten.convolution.default(
        inp, weight, bias, stride, padding, dilation, transposed, output_padding, groups
    )
    return _restride(out, _format(inp, weight))


def _conv_backward_meta(
    grad_output, inp, weight, stride, padding, dilation, transposed, output_padding, groups, output_mask
):
    bias_sizes = [weight.shape[1] * groups if transposed else weight.shape[0]]
    gi, gw, gb = torch.ops.aten.convolution_backward.default(
        grad_output, inp, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups,
        list(output_mask),
    )
    fmt = _format(inp, weight)
    return (
        _restride(gi, fmt) if output_mask[0] else None,
        _restride(gw, fmt) if output_mask[1] else None,
        _restride(gb, torch.contiguous_format) if output_mask[2] else None,
    )


def register() -> None:
    global _lib
    if _lib is not None:
        return
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("convolution_overrideable", _conv_meta, "Meta")
    lib.impl("convolution_backward_overrideable", _conv_backward_meta, "Meta")
    _lib = lib
