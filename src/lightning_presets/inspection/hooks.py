"""Whether a user's LightningModule overrides one of Lightning's hooks (not Lightning's own default)."""

from __future__ import annotations

from torch import nn

_LIGHTNING_PACKAGES = ("lightning.pytorch.", "pytorch_lightning.")


def overrides(model: nn.Module, hook: str) -> bool:
    """Whether a class of the user's, not Lightning's ``LightningModule``/``ModelHooks``, defines ``hook``."""
    for klass in type(model).__mro__:
        if hook in vars(klass):
            return not klass.__module__.startswith(_LIGHTNING_PACKAGES)
    return False
