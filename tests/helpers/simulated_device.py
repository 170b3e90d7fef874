"""A second device on a CPU-only machine, for tests of device mix-ups (issue 39).

The tensors of the "accelerator" live on torch's ``meta`` device (shapes and dtypes, no
data). :class:`SimulatedDevice` is a ``TorchFunctionMode`` that makes it behave like a GPU
where it matters:

* an op that mixes ``meta`` tensors with CPU tensors of one or more dimensions (CUDA
  allows 0-dim CPU scalars, and so does this mode), or that samples ``meta`` tensors
  with a CPU ``generator``, raises :class:`DeviceMixError` naming the op;
* copies to the host (``.cpu()``, ``.to("cpu")``, ``.item()``, ``float()``, ``.numpy()``,
  ``.tolist()``) succeed and are counted (``host_copies``); as the data is not there,
  they read ones.

FakeTensorMode with a fake ``"cuda"`` device was tried first: on a CPU build of torch
2.13 indexing (``t[i]``), ``as_tensor(numpy, device="cuda")`` and ``nn.Linear``'s init
fail with "PyTorch is not linked with support for cuda devices", so it cannot run the
learners' functions; and it does not check a sampler's generator.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch as th
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

DEVICE = th.device("meta")
_COPIES = {th.Tensor.cpu, th.Tensor.item, th.Tensor.numpy, th.Tensor.tolist, th.Tensor.__float__}
_CONVERSIONS = {th.Tensor.to, th.Tensor.copy_, th.Tensor.__bool__, th.Tensor.__int__}


class DeviceMixError(RuntimeError):
    """An op given tensors (or a generator) on two devices."""


def _to_host(tensor: th.Tensor) -> th.Tensor:
    return th.ones(tensor.shape, dtype=tensor.dtype)


class SimulatedDevice(TorchFunctionMode):
    """See the module docstring."""

    def __init__(self) -> None:
        super().__init__()
        self.host_copies = 0

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        leaves, _ = tree_flatten((args, kwargs))
        tensors = [x for x in leaves if isinstance(x, th.Tensor)]
        on_meta = [t for t in tensors if t.device.type == "meta"]
        if on_meta and func in _COPIES | _CONVERSIONS:
            return self._host_copy(func, args, kwargs)
        if on_meta:
            cpu = [t for t in tensors if t.device.type == "cpu" and t.dim() > 0]
            if cpu:
                raise DeviceMixError(
                    f"{getattr(func, '__name__', func)}: tensors on meta and cpu "
                    f"(cpu shapes {[tuple(t.shape) for t in cpu]})"
                )
            generator = kwargs.get("generator")
            if generator is not None and generator.device.type != "meta":
                raise DeviceMixError(
                    f"{getattr(func, '__name__', func)}: a {generator.device.type} generator "
                    "samples tensors on meta"
                )
        return func(*args, **kwargs)

    def _host_copy(self, func: Any, args: Any, kwargs: Any) -> Any:
        tensor = args[0]
        if func is th.Tensor.to:
            target = kwargs.get("device", args[1] if len(args) > 1 else None)
            if isinstance(target, th.Tensor):
                target = target.device
            if target is None or isinstance(target, th.dtype) or th.device(target).type == "meta":
                return func(*args, **kwargs)
            self.host_copies += 1
            dtype = kwargs.get("dtype", args[2] if len(args) > 2 else None)
            host = _to_host(tensor)
            return host if dtype is None or isinstance(dtype, bool) else host.to(dtype)
        if func is th.Tensor.copy_:
            if tensor.device.type == "meta":
                return tensor  # a copy into the device: nothing to hold
            self.host_copies += 1
            return tensor.fill_(1)
        self.host_copies += 1
        host = _to_host(tensor)
        if func is th.Tensor.cpu:
            return host
        if func is th.Tensor.numpy:
            return np.ones(tuple(tensor.shape), dtype=host.numpy().dtype)
        return getattr(host, func.__name__)()


def policy_on_device(policy: th.nn.Module) -> th.nn.Module:
    """``policy`` moved to the simulated device (``policy.device`` then reads ``meta``)."""
    return policy.to(DEVICE)
