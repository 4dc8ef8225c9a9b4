"""The one view of a DeepSpeed preset's config that the rules read: :class:`DeepSpeedConfigView`.

A DeepSpeed config exists in three states, and the view names each once:

- :attr:`~DeepSpeedConfigView.held`: the dict the strategy holds (loaded from a path or ``PL_DEEPSPEED_CONFIG_PATH``, or
  built from the preset's arguments), before Lightning adds anything;
- :attr:`~DeepSpeedConfigView.passed`: what Lightning will pass to ``deepspeed.initialize``, as far as construction
  knows it: its ``_format_config`` run on a copy (precision sections; Fabric's micro-batch default), and for the Trainer
  the accumulation and clipping it takes from ``Trainer(...)`` when ``fit`` starts;
- :attr:`~DeepSpeedConfigView.at_fit`: that config as DeepSpeed's own parser is given it here
  (:attr:`~DeepSpeedConfigView.parsed`): what construction cannot know is left out (see there).

Every question a rule asks of the config is a property below; ``Preset.resolve`` of the DeepSpeed presets stores the
raw states (:class:`HeldConfig`) and :func:`config_view` builds the view from them and the Context's vocabulary.
Nothing here imports DeepSpeed, torch or Lightning (the parser does, when :attr:`~DeepSpeedConfigView.parsed` is
first read).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Any, NamedTuple

from lightning_presets.core.context import Context
from lightning_presets.core.namespaces import Kind
from lightning_presets.strategies.deepspeed.parser import Parsed, parse

FORCE_DS_CPU_OPTIMIZER = "zero_force_ds_cpu_optimizer"
"""DeepSpeed refuses a client optimizer other than its own CPU Adam/Lion with ZeRO-Offload unless this is false."""
OFFLOAD_DEVICES = ("cpu", "nvme")
"""The devices ZeRO-Offload offloads to (DeepSpeed's ``"none"`` offloads nothing)."""
RESOLVED_KEY = "deepspeed_config"
"""The key of :class:`HeldConfig` in ``Context.resolved``."""

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def section(config: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """``config[key]`` when it is a mapping, else an empty one."""
    value = config.get(key)
    return value if isinstance(value, Mapping) else _EMPTY


def auto_keys(config: Mapping[str, Any], prefix: str = "") -> Iterator[str]:
    """Dotted paths of every value that is the string ``"auto"`` (a Hugging Face convention Lightning never fills)."""
    for key, value in config.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from auto_keys(value, f"{path}.")
        elif isinstance(value, str) and value.strip().lower() == "auto":
            yield path


class HalfPrecision(NamedTuple):
    """The config's half-precision sections as Lightning merges them with ``precision=``."""

    fp16: bool
    """``fp16.enabled`` once merged."""
    bf16: bool
    """``bf16.enabled`` once merged."""
    added: str | None
    """The section Lightning adds from ``precision=`` (``fp16``/``bf16``), or ``None``."""


def half_precision_sections(config: Mapping[str, Any], precision: str) -> HalfPrecision:
    """(fp16 enabled, bf16 enabled, the section Lightning adds from ``precision`` or ``None``), as Lightning
    merges them: it adds ``fp16`` for 16-bit precision unless the config has an ``fp16`` section, else ``bf16``
    for bf16 precision unless the config has a ``bf16`` section."""
    fp16 = section(config, "fp16").get("enabled") is True
    bf16 = section(config, "bf16").get("enabled") is True
    added = None
    if "fp16" not in config and precision in ("16-mixed", "16-true"):
        fp16, added = True, "fp16"
    elif "bf16" not in config and precision in ("bf16-mixed", "bf16-true"):
        bf16, added = True, "bf16"
    return HalfPrecision(fp16, bf16, added)


@dataclass(frozen=True, slots=True)
class HeldConfig:
    """What ``Preset.resolve`` reads off the built strategy, once, at construction (copies)."""

    config: Mapping[str, Any] | None
    """The config dict the strategy holds; ``None`` when it holds none."""
    formatted: Mapping[str, Any] | None
    """That config after Lightning's own ``_format_config`` (on a copy): its precision sections and, for Fabric, the
    micro-batch default; ``None`` when the strategy holds no config."""
    views: dict[tuple[Any, ...], DeepSpeedConfigView] = field(default_factory=dict, compare=False, repr=False)
    """:func:`config_view`'s views of it, one per Context reading (every rule of a job shares one, and one parse)."""


@dataclass(frozen=True)
class DeepSpeedConfigView:
    """The DeepSpeed config of one job, as every DeepSpeed rule reads it (see the module docstring)."""

    held: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    """The config the strategy holds, before Lightning adds anything; empty when there is none (``check``'s
    syntax-level fallback builds no strategy)."""
    passed: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    """The config Lightning will pass to ``deepspeed.initialize``, as far as construction knows it."""
    kind: Kind = "trainer"
    """``trainer`` or ``fabric``: the Context's :attr:`~lightning_presets.core.context.Context.kind`."""
    accelerator: str = "cuda"
    world_size: int = 1
    """The job's processes (``devices × num_nodes``)."""
    world_arithmetic: str = ""
    """How the Context counts them (``devices=4 × num_nodes=2 = 8``)."""

    # --- what the strategy holds ----------------------------------------------------------------------------

    @property
    def zero_stage(self) -> Any:
        """``zero_optimization.stage`` as written (DeepSpeed's default: 0)."""
        return section(self.held, "zero_optimization").get("stage", 0)

    @property
    def param_offload_device(self) -> Any:
        """``zero_optimization.offload_param.device`` as written; DeepSpeed's ``"none"`` when the section is absent,
        empty or names no device."""
        offload = section(section(self.held, "zero_optimization"), "offload_param")
        return offload.get("device", "none") if offload else "none"

    @property
    def train_batch_size(self) -> Any:
        return self.held.get("train_batch_size")

    @property
    def accumulation_steps(self) -> Any:
        """``gradient_accumulation_steps`` as written; ``None`` when absent."""
        return self.held.get("gradient_accumulation_steps")

    @property
    def gradient_clipping(self) -> Any:
        """``gradient_clipping`` as written; ``None`` when absent (then Lightning writes the Trainer's value)."""
        return self.held.get("gradient_clipping")

    @property
    def auto_keys(self) -> tuple[str, ...]:
        """Dotted paths of every ``"auto"`` value."""
        return tuple(auto_keys(self.held))

    def half_precision(self, precision: str) -> HalfPrecision:
        """The ``fp16``/``bf16`` sections once Lightning merges ``precision=`` into them."""
        return half_precision_sections(self.held, precision)

    @property
    def activation_checkpointing(self) -> Mapping[str, Any]:
        """The ``activation_checkpointing`` section (Lightning passes it to ``deepspeed.checkpointing.configure``)."""
        return section(self.held, "activation_checkpointing")

    @property
    def load_universal(self) -> bool:
        """``checkpoint.load_universal``: the engine loads a universal checkpoint."""
        return bool(section(self.held, "checkpoint").get("load_universal"))

    # --- what Lightning passes ------------------------------------------------------------------------------

    @property
    def micro_batch_size(self) -> Any:
        """``train_micro_batch_size_per_gpu`` as Lightning passes it: as written; Fabric's 1 when absent; ``None`` for
        the Trainer when absent (it takes the train dataloader's batch size when ``fit`` starts)."""
        return self.passed.get("train_micro_batch_size_per_gpu")

    @property
    def optimizer_offload_device(self) -> str | None:
        """The device ZeRO-Offload keeps the optimizer state on (``cpu``/``nvme``), or ``None``."""
        device = section(section(self.passed, "zero_optimization"), "offload_optimizer").get("device")
        return device if device in OFFLOAD_DEVICES else None

    @property
    def forces_deepspeed_cpu_optimizer(self) -> bool:
        """Whether DeepSpeed refuses a torch optimizer with ZeRO-Offload (``zero_force_ds_cpu_optimizer``, default
        true, not set to ``false``)."""
        return self.passed.get(FORCE_DS_CPU_OPTIMIZER, True) is not False

    # --- what DeepSpeed's own parser makes of it --------------------------------------------------------------

    @property
    def at_fit(self) -> Mapping[str, Any]:
        """:attr:`passed` as DeepSpeed's parser is given it at construction. The Trainer fills a missing micro-batch
        size from the dataloader when ``fit`` starts, so it is parsed as 1 and ``train_batch_size`` (which depends on
        it) is left to the batch-arithmetic rules; ``aio.use_gds``, which DeepSpeed checks against the accelerator of
        the machine it parses on, is left out for a job on CUDA."""
        config = dict(self.passed)
        if config and self.kind == "trainer" and "train_micro_batch_size_per_gpu" not in config:
            config.pop("train_batch_size", None)
            config["train_micro_batch_size_per_gpu"] = 1
        aio = section(config, "aio")
        if self.accelerator == "cuda" and "use_gds" in aio:  # validated against this machine's accelerator
            config["aio"] = {key: value for key, value in aio.items() if key != "use_gds"}
        return MappingProxyType(config)

    @cached_property
    def parsed(self) -> Parsed:
        """DeepSpeed's own ``DeepSpeedConfig`` on :attr:`at_fit`, for this job's world size (nothing to parse: no
        refusal, no warning)."""
        return parse(self.at_fit, self.world_size) if self.passed else Parsed(None, (), None)

    @property
    def data_parallel_size(self) -> int | None:
        """The world size DeepSpeed's batch arithmetic divides by, as its own parser computes it from the job's world
        size (``sequence_parallel_size`` divides it; a ``data_parallel_size`` × ``sequence_parallel_size`` mesh sets
        it); the job's world size when the parser stops before computing it; ``None`` when it is not a whole
        number (DeepSpeed's own arithmetic then refuses the batch sizes)."""
        size = self.parsed.world_size if self.parsed.world_size is not None else self.world_size
        return int(size) if float(size).is_integer() and size > 0 else None

    @property
    def data_parallel_arithmetic(self) -> str:
        """:attr:`world_arithmetic`, with the division by ``sequence_parallel_size`` when DeepSpeed makes one."""
        size = self.data_parallel_size
        if size is None or size == self.world_size:
            return self.world_arithmetic
        return f"{self.world_arithmetic}, of which DeepSpeed's data parallelism spans {size} ({_divided_by(self.held)})"


def _divided_by(config: Mapping[str, Any]) -> str:
    names = ("data_parallel_size", "sequence_parallel_size")
    return ", ".join(f"{name}={config[name]!r}" for name in names if name in config)


def config_view(ctx: Context) -> DeepSpeedConfigView:
    """The job's :class:`DeepSpeedConfigView`: the held states ``Preset.resolve`` stored, completed with what the
    Trainer adds when ``fit`` starts (``ctx.accumulate_grad_batches``, ``ctx.clipping``), as Lightning's
    ``_format_batch_size_and_grad_accum_config`` adds them. An empty view when nothing was resolved."""
    held = ctx.resolved.get(RESOLVED_KEY)
    empty = DeepSpeedConfigView(
        kind=ctx.kind, accelerator=ctx.accelerator, world_size=ctx.world_size, world_arithmetic=ctx.world_arithmetic
    )
    if not isinstance(held, HeldConfig) or held.config is None or held.formatted is None:
        return empty
    key = (ctx.kind, ctx.accelerator, ctx.world_size, ctx.world_arithmetic, ctx.accumulate_grad_batches, ctx.clipping)
    if key not in held.views:
        passed = dict(held.formatted)
        if ctx.kind == "trainer":
            if "gradient_accumulation_steps" not in passed and ctx.accumulate_grad_batches is not None:
                passed["gradient_accumulation_steps"] = ctx.accumulate_grad_batches
            passed.setdefault("gradient_clipping", ctx.clipping.value if ctx.clipping is not None else 0.0)
        held.views[key] = dataclasses.replace(empty, held=held.config, passed=MappingProxyType(passed))
    return held.views[key]
