"""The memory format ATen's CPU convolution gives its result, asked of ATen itself."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


def cpu_convolution_format(
    input_: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    settings: Sequence[Any],
    bias_sizes: Any = None,
) -> torch.memory_format | None:
    """The layout ATen's CPU convolution gives its result for these CPU operands (only
    their shapes, strides and dtypes are read), as torch's fake CPU kernel asks it:
    backend selection, 1-D convolutions as 2-D. None when that cannot be asked.
    ``settings``: stride, padding, dilation, transposed, output padding and groups."""
    try:
        stride, padding, dilation, transposed, output_padding, groups = settings
        backend = torch._C._select_conv_backend(
            input_,
            weight,
            bias,
            list(stride),
            list(padding),
            list(dilation),
            bool(transposed),
            list(output_padding),
            int(groups),
            bias_sizes,
        )
        if weight.dim() == 3:
            input_ = torch.empty(input_.shape, dtype=input_.dtype).unsqueeze(2)
            weight = weight.unsqueeze(2)
        layout = torch._C._conv_determine_backend_memory_format(input_, weight, backend)
    except (AttributeError, RuntimeError, TypeError, ValueError):  # not askable here
        return None
    return layout if isinstance(layout, torch.memory_format) else None
