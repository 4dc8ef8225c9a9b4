"""What model rules read off a model: its batch-norm layers and the device meshes its parameters live on."""

from __future__ import annotations

from torch import nn


def batch_norm_layers(model: nn.Module, *, unsynchronised: bool = False) -> list[str]:
    """The names of the model's batch-norm layers (``nn.BatchNorm1d/2d/3d`` and their subclasses); with
    ``unsynchronised``, only those that are not already ``nn.SyncBatchNorm``."""
    return [name or type(model).__name__ for name, module in model.named_modules()
            if isinstance(module, nn.modules.batchnorm._BatchNorm)
            and not (unsynchronised and isinstance(module, nn.SyncBatchNorm))]  # fmt: skip


def sync_batch_norm_layers(model: nn.Module) -> list[str]:
    """The names of the model's ``nn.SyncBatchNorm`` layers (built so, or converted already)."""
    layers = model.named_modules()
    return [name or type(model).__name__ for name, module in layers if isinstance(module, nn.SyncBatchNorm)]


def parameter_meshes(model: nn.Module) -> set[str]:
    """The device meshes the model's trainable parameters live on, described (``(dp=1, tp=2)``); ``local`` for plain
    tensors. Frozen parameters (``requires_grad=False``) have no gradient, so clipping never sees them.

    After ``configure_model`` applied tensor parallelism and FSDP2, each DTensor parameter names its mesh.
    """
    from torch.distributed.tensor import DTensor

    found = set()
    for parameter in model.parameters():
        if not parameter.requires_grad:
            continue
        if isinstance(parameter, DTensor):
            mesh = parameter.device_mesh
            names = mesh.mesh_dim_names or tuple(f"dim{index}" for index in range(mesh.ndim))
            found.add("(" + ", ".join(f"{name}={size}" for name, size in zip(names, mesh.shape, strict=True)) + ")")
        else:
            found.add("local")
    return found
