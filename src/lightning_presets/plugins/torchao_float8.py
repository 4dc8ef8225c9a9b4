"""A precision plugin that trains ``nn.Linear`` layers in float8 with torchao, the rest in bf16 autocast.

torchao is imported only when the model is converted. Layers whose input or output features are not
divisible by 16 (what the float8 matmul needs) are left in high precision and named in a warning.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from torch import nn

from lightning_presets.core.mixins import Next

FLOAT8_DIVISOR = 16
RECIPES = ("tensorwise", "rowwise", "rowwise_with_gw_hp")


def _ignored(name: str, ignore_modules: Iterable[str]) -> bool:
    return any(name == prefix or name.startswith(f"{prefix}.") for prefix in ignore_modules)


def float8_split(
    model: nn.Module, ignore_modules: Iterable[str] = (), divisor: int = FLOAT8_DIVISOR
) -> tuple[list[str], list[tuple[str, int, int]]]:
    """(names of the Linear layers to convert, (name, in_features, out_features) of those left in high precision).

    Layers under an ``ignore_modules`` prefix are in neither list; layers already converted are skipped.
    """
    ignore = tuple(ignore_modules)
    convertible, skipped = [], []
    for name, module in model.named_modules():
        if type(module) is not nn.Linear or _ignored(name, ignore):
            continue
        if module.in_features % divisor or module.out_features % divisor:
            skipped.append((name, module.in_features, module.out_features))
        else:
            convertible.append(name)
    return convertible, skipped


def describe_skipped(skipped: list[tuple[str, int, int]], limit: int = 8) -> str:
    shown = [f"{name or '<root>'} ({inputs}→{outputs})" for name, inputs, outputs in skipped[:limit]]
    if len(skipped) > limit:
        shown.append(f"... {len(skipped) - limit} more")
    return ", ".join(shown)


class TorchaoFloat8Precision(Next):
    """Converts the model's ``nn.Linear`` layers with ``torchao.float8.convert_to_float8_training``."""

    def __init__(self, *args: Any, recipe: str = "tensorwise", ignore_modules: Iterable[str] = (), **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.recipe = recipe
        self.ignore_modules = tuple(ignore_modules or ())

    def convert_module(self, module: nn.Module) -> nn.Module:
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training

        convertible = set(float8_split(module, self.ignore_modules)[0])
        if convertible:
            module = convert_to_float8_training(
                module,
                module_filter_fn=lambda _, name: name in convertible,
                config=Float8LinearConfig.from_recipe_name(self.recipe),
            )
        return cast(nn.Module, super().convert_module(module))
