"""The configurations the sweep draws from, and the stratified sampler.

A configuration is the JSON object ``tests/scripts/sweep_worker.py`` runs. A :class:`Dimension` is one thing a
user sets (a Trainer argument, a preset override, a property of the model or of the training loop); its first
value is the default, the others are deviations. Every configuration deviates from the defaults in at least one
dimension, so no sample is the trivially fine default job; for each preset the sampler places every deviation of
every dimension at least once before it repeats any (as long as the preset gets as many configurations as its
largest dimension has values), then adds random deviations up to a random depth, and the model a deviation needs
to matter (:data:`NEEDS`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Literal

Target = Literal["trainer", "overrides", "job"]


@dataclass(frozen=True)
class Dimension:
    name: str
    target: Target
    values: tuple[dict[str, Any], ...]
    """Settings merged into ``target``; the first is the default."""

    def label(self, index: int) -> str:
        value = self.values[index]
        return ", ".join(f"{key}={item!r}" for key, item in value.items()) or "default"


def single(name: str, target: Target, *values: Any, default: Any = None) -> Dimension:
    """A dimension of one argument: ``default`` (``None``: not passed) then ``values``."""
    first = {} if default is None else {name: default}
    return Dimension(name, target, (first, *({name: value} for value in values)))


TRAINER = (
    Dimension("clipping", "trainer", (
        {},
        {"gradient_clip_val": 0.05},
        {"gradient_clip_val": 0.05, "gradient_clip_algorithm": "norm"},
        {"gradient_clip_val": 0.01, "gradient_clip_algorithm": "value"},
    )),
    single("accumulate_grad_batches", "trainer", 2),
    single("precision", "trainer", "bf16-mixed", "16-mixed", "bf16-true", "16-true", "64-true"),
    single("sync_batchnorm", "trainer", True),
    single("devices", "trainer", "2", [0, 1], 1, default=2),
    single("deterministic", "trainer", True, "warn"),
    single("use_distributed_sampler", "trainer", False),
    single("inference_mode", "trainer", False),
    single("barebones", "trainer", True),
    single("max_steps", "trainer", 2),
    single("limit_train_batches", "trainer", 2, 0.5),
    single("limit_val_batches", "trainer", 0, 1),
    single("val_check_interval", "trainer", 1, 2),
    single("num_sanity_val_steps", "trainer", 0, 1),
    single("detect_anomaly", "trainer", True),
    single("benchmark", "trainer", True),
)  # fmt: skip
JOB = (
    single("architecture", "job", "batchnorm", "unused", "tied", default="plain"),
    single("optimizer", "job", "sgd", "adamw_steplr", default="adamw"),
    single("manual", "job", True, default=False),
    single("plugin", "job", "fp8-torchao", "bf16-fp32-reduce", default=None),
)
CONFIGURE_MODEL = single("configure_model", "job", True, default=False)
SHARDS_ITSELF = single("configure_model", "job", False, default=True)
DDP_OVERRIDES = (
    single("find_unused_parameters", "overrides", True),
    single("gradient_as_bucket_view", "overrides", False, True),
    single("broadcast_buffers", "overrides", False),
    single("bucket_cap_mb", "overrides", 1),
    single("init_sync", "overrides", False),
    single("skip_all_reduce_unused_params", "overrides", True),
)
FSDP2_SPLITS = Dimension("split", "overrides", (
    {},
    {"data_parallel_size": 2},
    {"data_parallel_size": 2, "tensor_parallel_size": 1},
    {"data_parallel_size": 1, "tensor_parallel_size": 2},
    {"tensor_parallel_size": 2},
    {"data_parallel_size": 1},
))  # fmt: skip
TP2D_SPLITS = Dimension("split", "overrides", (
    {},
    {"data_parallel_size": 1, "tensor_parallel_size": 2},
    {"data_parallel_size": 2, "tensor_parallel_size": 1},
    {"data_parallel_size": 2, "tensor_parallel_size": 2},
    {"tensor_parallel_size": 1},
    {"data_parallel_size": 2},
))  # fmt: skip
PRESETS: dict[str, tuple[Dimension, ...]] = {
    "fsdp2": (*TRAINER, *JOB, CONFIGURE_MODEL, FSDP2_SPLITS),
    "fsdp2_offload_ckpt": (*TRAINER, *JOB, CONFIGURE_MODEL, FSDP2_SPLITS),
    "tp2d_hybrid": (*TRAINER, *JOB, SHARDS_ITSELF, TP2D_SPLITS),
    "ddp_static_graph": (*TRAINER, *JOB, CONFIGURE_MODEL, single("static_graph", "overrides", False), *DDP_OVERRIDES),
    "ddp_bf16_compress": (
        *TRAINER, *JOB, CONFIGURE_MODEL, single("static_graph", "overrides", True),
        Dimension("ddp_comm_hook", "overrides", ({}, {"ddp_comm_hook": None})), *DDP_OVERRIDES,
    ),
}  # fmt: skip
"""Every preset that trains on CPU, with the dimensions that apply to it."""
EXCLUSIVE = (frozenset({"precision", "plugin"}),)
"""Dimensions never deviated together: Lightning takes a precision plugin or a precision, not both."""
NEEDS = {
    ("sync_batchnorm", 1): ("architecture", 1),  # a BatchNorm to synchronise
    ("find_unused_parameters", 1): ("architecture", 2),  # a parameter the loss does not use
    ("static_graph", 1): ("architecture", 2),
    ("skip_all_reduce_unused_params", 1): ("architecture", 2),
}
"""Deviations that only matter with a property of the model: drawn with it half of the time (when the model's
dimension is still free), so the interaction is sampled and not left to chance."""


def configuration(preset: str, choices: dict[str, int]) -> dict[str, Any]:
    """The configuration of ``preset`` with ``choices`` (dimension name -> value index; others at the default)."""
    config: dict[str, Any] = {
        "preset": preset, "overrides": {}, "trainer": {}, "architecture": "plain", "configure_model": False,
        "optimizer": "adamw", "manual": False, "plugin": None,
    }  # fmt: skip
    for dimension in PRESETS[preset]:
        value = dimension.values[choices.get(dimension.name, 0)]
        if dimension.target == "job":
            config.update(value)
        else:
            config[dimension.target].update(value)
    config["deviations"] = {name: index for name, index in sorted(choices.items()) if index}
    return config


def sample(count: int, seed: int, presets: tuple[str, ...] | None = None, depth: int = 3) -> list[dict[str, Any]]:
    """``count`` configurations, spread evenly over ``presets`` (default: all) and stratified within each."""
    rng = random.Random(seed)
    names = presets or tuple(PRESETS)
    per_preset = {name: count // len(names) + (index < count % len(names)) for index, name in enumerate(names)}
    configs = []
    for name in names:
        chosen = _stratified(PRESETS[name], per_preset[name], rng, depth)
        configs += [dict(configuration(name, choices), id=f"{name}-{i:03d}") for i, choices in enumerate(chosen)]
    return configs


def _stratified(dimensions: tuple[Dimension, ...], count: int, rng: random.Random, depth: int) -> list[dict[str, int]]:
    if count == 0:
        return []
    deviations = [(d.name, index) for d in dimensions for index in range(1, len(d.values))]
    rng.shuffle(deviations)
    chosen: list[dict[str, int]] = [{} for _ in range(count)]
    for name, index in deviations:  # each deviation once, to the configuration with the fewest so far
        free = [each for each in chosen if not _blocked(name, each)]
        if free:
            fewest = min(len(each) for each in free)
            rng.choice([each for each in free if len(each) == fewest])[name] = index
    by_name = {d.name: d for d in dimensions}
    for each in chosen:  # then random deviations up to a random depth
        target = rng.randint(1, depth)
        while len(each) < target:
            name = rng.choice([n for n in by_name if not _blocked(n, each)])
            each[name] = rng.randrange(1, len(by_name[name].values))
        for (name, index), (partner, value) in NEEDS.items():
            if each.get(name) == index and partner in by_name and partner not in each and rng.random() < 0.5:
                each[partner] = value
    return chosen


def _blocked(name: str, chosen: dict[str, int]) -> bool:
    """Whether ``name`` cannot deviate in a configuration with ``chosen``: it does already, or an exclusive one does."""
    return name in chosen or any(name in group and group & set(chosen) for group in EXCLUSIVE)


def coverage(configs: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """How often each deviation of each dimension was drawn, per preset (``preset: {"dim: value": count}``)."""
    counts: dict[str, dict[str, int]] = {}
    for config in configs:
        dimensions = {d.name: d for d in PRESETS[config["preset"]]}
        table = counts.setdefault(config["preset"], {})
        for d in PRESETS[config["preset"]]:
            for index in range(1, len(d.values)):
                table.setdefault(f"{d.name}: {d.label(index)}", 0)
        for name, index in config["deviations"].items():
            table[f"{name}: {dimensions[name].label(index)}"] += 1
    return counts


def describe(config: dict[str, Any]) -> str:
    """The job as a user would write it (one line)."""
    strategy = repr(config["preset"])
    if config["overrides"]:
        overrides = "".join(f", {key}={value!r}" for key, value in config["overrides"].items())
        strategy = f"lightning_presets.strategy({config['preset']!r}{overrides})"
    arguments = [f"strategy={strategy}", "accelerator='cpu'"]
    trainer = {"max_steps": 3, **config["trainer"]}
    if "devices" not in trainer:
        trainer["devices"] = 2
    arguments += [f"{key}={value!r}" for key, value in trainer.items()]
    if config["plugin"]:
        arguments.append(f"plugins=[lightning_presets.precision({config['plugin']!r})]")
    model = [config["architecture"], config["optimizer"]]
    model += ["configure_model"] if config["configure_model"] else []
    model += ["manual optimization"] if config["manual"] else []
    return f"Trainer({', '.join(arguments)}).fit(<{', '.join(model)}>)"
