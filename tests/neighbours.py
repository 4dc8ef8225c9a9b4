"""Every error rule's legal side, as data: accepted neighbours of each refused configuration, and how to run them.

A *neighbour* is a legal configuration next to a rule's refused one: the same preset and call with the one value the
rule looks at moved to a legal value at or near the boundary (each valid split of a size, each precision that really
works, ...). Each rule's neighbours live in the test module mirroring the rule's module (its ``NEIGHBOURS``, run there
by :func:`neighbour_tests`); :data:`NEIGHBOURS` maps every error rule's code to its neighbours, wherever declared.
:func:`run` executes one through the machinery the documented examples use (``lightning_presets.tools.examples``: the
Trainer/Fabric built on simulated hardware, ``fit``/``setup`` running the guards' model, setup, optimizer and resume
stages without training), or, for a ``lightning-presets check`` command, through ``check``'s own engine in-process.

:func:`widened` replaces a rule's function with one that fires (always, or only on the argument fingerprints a clean
run recorded): the mutation check of ``tests/test_rule_mutations.py`` uses it to prove each neighbour reaches its rule.
Known false rejections (a legal neighbour the rule refuses today) carry ``false_rejection``: the reason, with the
evidence, for a strict expected failure.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import os
import pkgutil
import re
import shlex
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from torch import nn
from torch.distributed.checkpoint.api import CheckpointException  # a BaseException: torch's writer failing

from lightning_presets.core.codes import Setting
from lightning_presets.core.findings import PresetConfigError, PresetWarning
from lightning_presets.core.rules import Problem, Rule
from lightning_presets.tools import examples as _examples
from lightning_presets.tools.simulation.lightning import dry_runs

CHECK = "lightning-presets check"
GPU8 = Setting()  # 8 simulated H100s (capability 9.0) on one node: the default of every documented example
CPU = Setting(gpus=0)
MPS = Setting(simulated=("mps",))
XLA = Setting(gpus=0, simulated=("torch_xla",))
XLA_GPU8 = Setting(simulated=("torch_xla",))
CPU_ONLY_TORCH = Setting(gpus=0, simulated=("cpu_only_torch",))
TE = Setting(simulated=("transformer_engine",))


@dataclass(frozen=True, slots=True)
class Neighbour:
    """One legal configuration next to a rule's refused one."""

    source: str
    """A documented-example-like program (the names of ``tools.examples.PRELUDE`` defined), or a ``check`` command."""
    why: str
    """Why it is legal: what changed from the refused configuration, and which code path accepts it."""
    setting: Setting = GPU8
    false_rejection: str = ""
    """Non-empty for a legal configuration the rule refuses today: the evidence that it works (a strict xfail)."""


@dataclass(frozen=True, slots=True)
class Result:
    """What one run reported: error and warning codes, and an exception that is not a finding."""

    errors: frozenset[str]
    warnings: frozenset[str]
    exception: str | None = None
    calls: tuple[str, ...] = ()
    """The argument fingerprints of every call of the traced rule (see :func:`fingerprint`)."""

    @property
    def codes(self) -> frozenset[str]:
        return self.errors | self.warnings


# --- running a neighbour -------------------------------------------------------------------------------------------


def run(neighbour: Neighbour, trace: str | None = None) -> Result:
    """Execute ``neighbour``; with ``trace`` (a code), record the fingerprint of every call of that rule."""
    calls: list[str] = []
    with contextlib.ExitStack() as stack:
        stack.enter_context(_process_state_kept())
        if trace is not None:
            stack.enter_context(_traced(trace, calls))
        if neighbour.source.startswith(CHECK):
            result = _run_check(neighbour.source)
        else:
            result = _run_program(neighbour.source, neighbour.setting)
    return Result(result.errors, result.warnings, result.exception, tuple(calls))


@contextlib.contextmanager
def _process_state_kept() -> Iterator[None]:
    """The environment and torch's thread count as they were: Lightning's launch sets ``OMP_NUM_THREADS`` and
    ``torch.set_num_threads(1)`` for a CPU job, which must not leak into the tests that run after a neighbour."""
    import torch

    environment, threads = dict(os.environ), torch.get_num_threads()
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(environment)
        torch.set_num_threads(threads)


def _run_program(source: str, setting: Setting) -> Result:
    errors: set[str] = set()
    found: set[str] = set()
    exception = None
    with _examples._setting(setting), dry_runs(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            exec(compile(source, "<neighbour>", "exec"), _examples._namespace())  # this module's own data
        except PresetConfigError as raised:
            for finding in raised.findings:
                (errors if finding.severity == "error" else found).add(finding.code)
        except (Exception, CheckpointException) as raised:  # not a finding: the neighbour is not what it says
            text = str(raised).strip()
            exception = f"{type(raised).__name__}: {text.splitlines()[0] if text else ''}"
    found.update(w.message.finding.code for w in caught if isinstance(w.message, PresetWarning))
    return Result(frozenset(errors), frozenset(found - errors), exception)


@functools.cache
def _check_parser() -> argparse.ArgumentParser:
    from lightning_presets.cli import _check

    parser = argparse.ArgumentParser(prog=CHECK)
    _check.add_arguments(parser)
    return parser


def _run_check(command: str) -> Result:
    from lightning_presets.cli import _check
    from lightning_presets.inspection.machine import simulating_target
    from lightning_presets.tools.check.machine import target_from
    from lightning_presets.tools.verdict import run_check

    args = _check_parser().parse_args(shlex.split(command.removeprefix(CHECK)))
    target = target_from(args.driver_cuda, args.torch_cuda, args.torch_arch_list, args.torch_without_nccl)
    with simulating_target(target):  # the target's driver and torch build, as the command's own run applies them
        report = run_check(_check.request_from(args))
    errors = frozenset(f.code for f in report.findings if f.severity == "error")
    return Result(errors, frozenset(f.code for f in report.findings) - errors)


# --- the rules, and widening one --------------------------------------------------------------------------------


RULE_PACKAGES = tuple(f"lightning_presets.{name}" for name in ("strategies", "guards", "plugins", "tools.check"))
"""Where rules are declared (every module below them is walked, as ``scripts/errors_doc.py`` walks the package)."""


@functools.cache
def declared_rules() -> dict[str, tuple[Rule, ...]]:
    """Every :class:`Rule` object declared at the top level of a module of :data:`RULE_PACKAGES`, by code."""
    found: dict[str, list[Rule]] = {}
    modules = []
    for name in RULE_PACKAGES:
        package = importlib.import_module(name)
        modules += [name, *(info.name for info in pkgutil.walk_packages(package.__path__, f"{name}."))]
    for module in modules:
        for value in vars(importlib.import_module(module)).values():
            if isinstance(value, Rule) and all(value is not known for known in found.get(value.code, ())):
                found.setdefault(value.code, []).append(value)
    return {code: tuple(rules) for code, rules in sorted(found.items())}


def error_rules() -> dict[str, Rule]:
    return {code: rules[0] for code, rules in declared_rules().items() if rules[0].severity == "error"}


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+|/tmp/lp-examples-[^/'\"]+/?")
_REPLACED = re.compile(r"(_traced|widened)\.<locals>\.make\.<locals>\.(traced|fire)")


def fingerprint(args: tuple[Any, ...]) -> str:
    """What a rule was called with, comparable across runs: no object addresses, no scratch directory, and the rule
    under test's own function (a precision preset's repr holds its rules) the same whether traced or widened; a
    model also by its methods and its trainable parameters (a frozen layer or an override leaves its repr alone)."""
    return _REPLACED.sub("<replaced>", _ADDRESS.sub("", repr(tuple(_described(each) for each in args))))


def _described(value: Any) -> Any:
    """A model by what a rule may read of it beyond its repr: the methods its own classes define (not torch's or
    Lightning's) and which parameters train."""
    if not isinstance(value, nn.Module):
        return value
    own = [
        klass for klass in type(value).__mro__ if not klass.__module__.startswith(("torch.", "lightning.", "builtins"))
    ]
    methods = sorted(name for klass in own for name in vars(klass) if not name.startswith("__"))
    return (repr(value), methods, [p.requires_grad for p in value.parameters()])


@contextlib.contextmanager
def _replaced(
    code: str, make: Callable[[Callable[..., Problem | None]], Callable[..., Problem | None]]
) -> Iterator[None]:
    """Every rule object of ``code`` with its function replaced by ``make(original)``; restored afterwards."""
    rules = declared_rules()[code]
    originals = [each.check for each in rules]
    try:
        for each, original in zip(rules, originals, strict=True):
            object.__setattr__(each, "check", make(original))  # a frozen dataclass: only this test swaps it
        yield
    finally:
        for each, original in zip(rules, originals, strict=True):
            object.__setattr__(each, "check", original)


def _traced(code: str, calls: list[str]) -> contextlib.AbstractContextManager[None]:
    def make(original: Callable[..., Problem | None]) -> Callable[..., Problem | None]:
        def traced(*args: Any) -> Problem | None:
            calls.append(fingerprint(args))
            return original(*args)

        return traced

    return _replaced(code, make)


def widened(code: str, only: frozenset[str] | None = None) -> contextlib.AbstractContextManager[None]:
    """Rule ``code`` made to fire whenever it runs, or (``only``) when its arguments' fingerprint is one of those."""

    def make(original: Callable[..., Problem | None]) -> Callable[..., Problem | None]:
        def fire(*args: Any) -> Problem | None:
            if only is None or fingerprint(args) in only:
                return Problem(f"{code} widened by the mutation check", "a test must notice this")
            return original(*args)

        return fire

    return _replaced(code, make)


# --- the data ------------------------------------------------------------------------------------------------------

FEWER_THAN_THREE: dict[str, str] = {}
"""Rules that cannot have three legal neighbours, and why (none today)."""

TESTS = Path(__file__).resolve().parent


def mirrored_modules(root: Path = TESTS) -> list[str]:
    """The dotted names of the mirrored test modules that declare neighbours: ``test_*.py`` in a package under
    ``tests/`` (``tests/strategies/deepspeed/test_config_rules.py`` is ``strategies.deepspeed.test_config_rules``, the
    name pytest imports it by) whose text assigns ``NEIGHBOURS``."""
    found = []
    for path in sorted(root.rglob("test_*.py")):
        parents = path.relative_to(root).parents
        packaged = len(parents) > 1 and all((root / parent / "__init__.py").exists() for parent in list(parents)[:-1])
        if packaged and "\nNEIGHBOURS: " in path.read_text(encoding="utf-8"):
            found.append(".".join(path.relative_to(root).with_suffix("").parts))
    return found


class _AllNeighbours(Mapping[str, tuple[Neighbour, ...]]):
    """Every error rule's accepted neighbours, by code: each mirrored test module's ``NEIGHBOURS``, read when first
    used (those modules import this one)."""

    @functools.cached_property
    def _table(self) -> dict[str, tuple[Neighbour, ...]]:
        table: dict[str, tuple[Neighbour, ...]] = {}
        for name in mirrored_modules():
            for code, neighbours in importlib.import_module(name).NEIGHBOURS.items():
                if code in table:
                    raise ValueError(f"{code}: neighbours in {name} and elsewhere: keep them in one module")
                table[code] = neighbours
        return dict(sorted(table.items()))

    def __getitem__(self, code: str) -> tuple[Neighbour, ...]:
        return self._table[code]

    def __iter__(self) -> Iterator[str]:
        return iter(self._table)

    def __len__(self) -> int:
        return len(self._table)


NEIGHBOURS: Mapping[str, tuple[Neighbour, ...]] = _AllNeighbours()
"""Every error rule's accepted neighbours, by code, wherever they are declared."""


def adder(table: dict[str, tuple[Neighbour, ...]]) -> Callable[..., None]:
    """``add(code, *neighbours)``: appends to ``table`` (a mirrored test module's ``NEIGHBOURS``)."""

    def add(code: str, *neighbours: Neighbour) -> None:
        table[code] = table.get(code, ()) + neighbours

    return add


def n(source: str, why: str, setting: Setting = GPU8, false_rejection: str = "") -> Neighbour:
    return Neighbour(source=source, why=why, setting=setting, false_rejection=false_rejection)


# Programs shared by several neighbours -------------------------------------------------------------------------

LINEAR = "nn.Linear(64, 64)"
BLOCKS = "model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))\n"  # small: DCP writes it quickly
CLIPPING_MODULE = (
    "from lightning.pytorch import LightningModule\n\n"
    "class Model(LightningModule):\n"
    "    def __init__(self):\n        super().__init__()\n        self.layer = nn.Linear(64, 64)\n\n"
    "    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):\n"
    "        self.trainer.model.clip_grad_norm_(gradient_clip_val)\n\n"
)
TWO_MESHES = (
    "from lightning.pytorch import LightningModule\n"
    "from torch.distributed.fsdp import fully_shard\n"
    "from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module\n\n"
    "class Model(LightningModule):\n"
    "    def __init__(self):\n        super().__init__()\n"
    "        self.up, self.head = nn.Linear(8, 8), nn.Linear(8, 8)\n\n"
    "    def configure_model(self):\n"
    "        {freeze}parallelize_module(self.up, self.device_mesh['tensor_parallel'], ColwiseParallel())\n"
    "        fully_shard(self.head, mesh=self.device_mesh['data_parallel'])\n"
    "{extra}\n"
)
ONE_MESH = (
    "from lightning.pytorch import LightningModule\n"
    "from torch.distributed.fsdp import fully_shard\n\n"
    "class Model(LightningModule):\n"
    "    def __init__(self):\n        super().__init__()\n"
    "        self.up, self.head = nn.Linear(8, 8), nn.Linear(8, 8)\n\n"
    "    def configure_model(self):\n"
    "        fully_shard(self.up, mesh=self.device_mesh['data_parallel'])\n"
    "        fully_shard(self.head, mesh=self.device_mesh['data_parallel'])\n\n"
)
ZERO_CHECKPOINT = (
    BLOCKS + "import os   # run.ckpt: the files of a ZeRO-{stage} checkpoint Lightning wrote on {world} GPUs\n"
    "os.makedirs('run.ckpt/checkpoint'); open('run.ckpt/latest', 'w').write('checkpoint')\n"
    "torch.save({{'module': {{}}, 'dp_world_size': {world}, 'mp_world_size': 1, 'ds_config': {{'zero_optimization': "
    "{{'stage': {stage}}}}}, 'lr_schedulers': [], 'pytorch-lightning_version': '2.6.6'}}, "
    "'run.ckpt/checkpoint/{model_file}')\n"
    "for rank in range({world}):\n"
    "    torch.save({{}}, f'run.ckpt/checkpoint/bf16_zero_pp_rank_{{rank}}_mp_rank_00_optim_states.pt')\n"
)


def zero_checkpoint(stage: int = 2, world: int = 8) -> str:
    model_file = "zero_pp_rank_0_mp_rank_00_model_states.pt" if stage == 3 else "mp_rank_00_model_states.pt"
    return ZERO_CHECKPOINT.format(stage=stage, world=world, model_file=model_file)


MODEL_PARALLEL_FOLDER = (
    BLOCKS
    + "import torch.distributed.checkpoint as dcp   # ModelParallelStrategy's layout: weights under 'state_dict'\n"
    "from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict\n"
    "optimizer = torch.optim.Adam(model.parameters())\n"
    "dcp.save({'state_dict': model.state_dict(), 'optimizer_0': get_optimizer_state_dict(model, optimizer)}, "
    "checkpoint_id='run.ckpt')\n"
    "torch.save({'lr_schedulers': [], 'pytorch-lightning_version': '2.6.6'}, 'run.ckpt/meta.pt')\n"
)
TRAINER_FILE = (
    BLOCKS + "optimizer = torch.optim.Adam(model.parameters())   # a single-file checkpoint, as DDP writes\n"
    "torch.save({'state_dict': model.state_dict(), 'optimizer_states': [optimizer.state_dict()], {more}"
    "'lr_schedulers': [], 'pytorch-lightning_version': '2.6.6'}}, 'run.ckpt')\n"
)


def trainer_file(more: str = "") -> str:
    return TRAINER_FILE.replace("{more}", more).replace("{{}}", "{}").replace("}}, 'run", "}, 'run")


FIT = '.fit(model, ckpt_path="run.ckpt")'


def _t(strategy: str, accelerator: str = "cuda", more: str = "", devices: object = 8) -> str:
    return f"Trainer(strategy={strategy}, accelerator={accelerator!r}, devices={devices!r}{more})"


def _ds(config: str, preset: str = "deepspeed_zero2_offload", target: str = "") -> str:
    return f'lightning_presets.strategy("{preset}"{target}, config={config})'


# --- where each rule's neighbours live: the test module mirroring the rule's module ---------------------------------
# tests/strategies/{ddp,fsdp,fsdp_family,fsdp2,model_parallel,xla}/test_rules.py, tests/strategies/deepspeed/
# test_{config,job}_rules.py, tests/guards/test_{launch,precision}_rules.py, tests/guards/resume/test_rules.py,
# tests/plugins/test_presets.py, tests/tools/check/test_{cluster,launchers}.py. The programs several of them share:

_hybrid = 'lightning_presets.strategy("fsdp_hybrid_shard", {})'  # the mesh rules of fsdp.py and fsdp_family.py
# the norm layers, for the sync_batchnorm rules of ModelParallelStrategy and DDP
_bn = "model = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8))\n"
_ln = "model = nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8))\n"
_gn = "model = nn.Sequential(nn.Linear(8, 8), nn.GroupNorm(2, 8))\n"
_TRAINED = "; trained on 2 CPU processes: tests/test_fsdp2.py::test_the_cpu_neighbours_of_the_norm_rules_train"
_C = f"{CHECK} --accelerator cuda --gpus 8 "  # a check command on 8 GPUs: the cluster and launcher rules


# --- what the tests share ----------------------------------------------------------------------------------------


def cases(table: Mapping[str, tuple[Neighbour, ...]]) -> list[tuple[str, int]]:
    """``(code, index)`` of every neighbour of ``table``."""
    return [(code, index) for code, neighbours in table.items() for index in range(len(neighbours))]


@functools.cache
def clean(code: str, index: int) -> Result:
    """The neighbour run once per process, the rule under test traced (both test files read it)."""
    return run(NEIGHBOURS[code][index], trace=code)


def noticed(code: str, result: Result) -> bool:
    """Whether ``result`` reports rule ``code`` as its severity says (a widened error rule refuses)."""
    rule = declared_rules()[code][0]
    return code in (result.errors if rule.severity == "error" else result.warnings)


def accepted_problem(code: str, result: Result) -> str:
    """Why ``result`` is not an accepted neighbour of rule ``code``; empty when it is.

    No error of any code, no exception, the rule reached; the rule's own code only as the conditional warning a
    model-stage rule gives before the model exists (:attr:`Rule.unless`), never as an error.
    """
    rule = declared_rules()[code][0]
    if result.exception is not None:
        return f"raised {result.exception}"
    if result.errors:
        return f"refused with {sorted(result.errors)}"
    if code in result.warnings and not getattr(rule, "unless", ""):
        return f"{code} fired (as a warning)"
    if not result.calls:
        return f"never reached {code}"
    return ""


def param(code: str, index: int, neighbour: Neighbour) -> Any:
    """A known false rejection (``false_rejection`` set) is a strict expected failure: it passes once the rule is
    fixed, and then the entry must lose its ``false_rejection`` (the review's ones are fixed; the data keeps the
    story in ``why``)."""
    marks = [pytest.mark.xfail(strict=True, reason=neighbour.false_rejection)] if neighbour.false_rejection else []
    return pytest.param(code, index, id=f"{code}-{index}", marks=marks)


def neighbour_tests(table: Mapping[str, tuple[Neighbour, ...]]) -> tuple[Callable[..., None], ...]:
    """The tests of ``table``'s neighbours, for the module that declares them: each neighbour accepted, and each rule,
    widened to fire always or only at one neighbour's arguments, noticed (``tests/test_rule_mutations.py`` says why).
    Assign them to ``test_*`` names of that module."""

    @pytest.mark.parametrize(
        ("code", "index"), [param(code, index, table[code][index]) for code, index in cases(table)]
    )
    def test_the_neighbour_is_accepted(code: str, index: int) -> None:
        problem = accepted_problem(code, clean(code, index))
        assert problem == "", f"{code} neighbour {index} ({table[code][index].why}): {problem}"

    @pytest.mark.parametrize("code", sorted(table))
    def test_a_rule_widened_to_always_fire_is_noticed(code: str) -> None:
        """The simplest sound widening: the rule fires whenever it runs. One neighbour noticing suffices here; that
        each one does is the narrower check (a neighbour that notices the narrow widening notices this one too)."""
        with widened(code):
            first = next((index for index, each in enumerate(table[code]) if noticed(code, run(each))), None)
        assert first is not None, f"{code} widened to fire always, and none of its neighbours noticed"

    @pytest.mark.parametrize("code", sorted(table))
    def test_a_rule_widened_at_one_neighbour_is_noticed_by_that_neighbour(code: str) -> None:
        unnoticed = []
        for index, each in enumerate(table[code]):
            calls = frozenset(clean(code, index).calls)
            assert calls, f"{code} neighbour {index} never reaches the rule"
            with widened(code, only=calls):
                if not noticed(code, run(each)):
                    unnoticed.append(f"{index} ({each.why})")
        assert unnoticed == [], f"{code} widened at one neighbour's configuration, unnoticed by: {unnoticed}"

    return (
        test_the_neighbour_is_accepted,
        test_a_rule_widened_to_always_fire_is_noticed,
        test_a_rule_widened_at_one_neighbour_is_noticed_by_that_neighbour,
    )


def trained(job: str) -> dict[str, Any]:
    """Run ``job`` (a function below) on 2 gloo processes through the fork server: it must train 3 finite losses;
    rank 0's report."""
    import math

    from harness import run_job

    result = run_job(f"neighbours:{job}", path=(str(TESTS),), timeout=180)
    assert result.outcome == "trained", result.describe()
    (report,) = result.reports()
    assert len(report["losses"]) == 3
    assert all(math.isfinite(loss) for loss in report["losses"])
    return dict(report)


# --- real runs of the review's false rejections (2 processes, gloo, through tests/harness.py) -------------------
# Each is a ``module:function`` target of ``run_job``: rank 0 prints ``RESULT {json}``.


def _trainer(strategy: object, **arguments: Any) -> Any:
    from lightning.pytorch import Trainer

    settings: dict[str, Any] = {"accelerator": "cpu", "devices": 2, "max_steps": 3, "logger": False}
    settings |= {"enable_checkpointing": False, "enable_progress_bar": False, "enable_model_summary": False}
    return Trainer(strategy=strategy, **(settings | arguments))


def _report(module: Any, **extra: Any) -> None:
    import json

    import torch

    if torch.distributed.get_rank() == 0:
        print("RESULT " + json.dumps({"losses": module.losses, **extra}), flush=True)


def train_tp2d_64_true() -> None:
    """tp2d_hybrid by name with precision='64-true': a 1×2 mesh, tensor-parallel float64 DTensor parameters."""
    import torch
    from lightning.pytorch import LightningModule
    from torch.distributed.tensor import DTensor
    from torch.utils.data import DataLoader

    from models import TinyTransformer, counting_sequences, next_token_loss, parallelize

    class Model(LightningModule):  # type: ignore[misc]  # Lightning is not followed by mypy
        def __init__(self) -> None:
            super().__init__()
            self.model = TinyTransformer()
            self.losses: list[float] = []

        def configure_model(self) -> None:
            parallelize(self.model, self.device_mesh)

        def training_step(self, batch: torch.Tensor) -> torch.Tensor:
            loss = next_token_loss(self.model, batch)
            self.losses.append(float(loss))
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(0)
    module = Model()
    _trainer("tp2d_hybrid", precision="64-true").fit(module, DataLoader(counting_sequences(12), batch_size=4))  # type: ignore[arg-type]
    parameters = list(module.parameters())
    _report(
        module,
        dtypes=sorted({str(p.dtype) for p in parameters}),
        dtensors=sum(isinstance(p, DTensor) for p in parameters),
        parameters=len(parameters),
    )


def train_tp2d_frozen_tensor_parallel_clipped() -> None:
    """Clipping by norm with a frozen tensor-parallel layer (tensor mesh) and a trainable head (data mesh)."""
    import torch
    from lightning.pytorch import LightningModule
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor, Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module
    from torch.utils.data import DataLoader, TensorDataset

    class Model(LightningModule):  # type: ignore[misc]  # Lightning is not followed by mypy
        def __init__(self) -> None:
            super().__init__()
            self.up, self.head = nn.Linear(8, 8), nn.Linear(8, 1)
            self.losses: list[float] = []

        def configure_model(self) -> None:
            self.up.requires_grad_(False)
            parallelize_module(
                self.up, self.device_mesh["tensor_parallel"], ColwiseParallel(output_layouts=Replicate())
            )
            fully_shard(self.head, mesh=self.device_mesh["data_parallel"])

        def training_step(self, batch: list[torch.Tensor]) -> torch.Tensor:
            inputs, target = batch
            loss = nn.functional.mse_loss(self.head(torch.relu(self.up(inputs))), target)
            self.losses.append(float(loss))
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)  # the frozen parameters too: they have no gradient

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(12, 8), torch.randn(12, 1))
    module = Model()
    _trainer("tp2d_hybrid", gradient_clip_val=0.5).fit(module, DataLoader(data, batch_size=4))
    meshes = {str(p.device_mesh.mesh_dim_names) for p in module.parameters() if isinstance(p, DTensor)}
    _report(module, meshes=sorted(meshes), frozen=sum(not p.requires_grad for p in module.parameters()))


def train_ddp_bf16_compress_on_cpu() -> None:
    """The Trainer with ddp_bf16_compress on CPU: Lightning registers no comm hook off CUDA, plain DDP trains."""
    import torch
    from lightning.pytorch import LightningModule
    from torch.utils.data import DataLoader, TensorDataset

    class Model(LightningModule):  # type: ignore[misc]  # Lightning is not followed by mypy
        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.Linear(4, 1)
            self.losses: list[float] = []

        def training_step(self, batch: list[torch.Tensor]) -> torch.Tensor:
            loss = nn.functional.mse_loss(self.layer(batch[0]), batch[1])
            self.losses.append(float(loss))
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(0)
    module = Model()
    trainer = _trainer("ddp_bf16_compress")
    trainer.fit(module, DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4))
    weights = torch.cat([p.detach().flatten() for p in module.parameters()])
    gathered = [torch.zeros_like(weights) for _ in range(torch.distributed.get_world_size())]
    torch.distributed.all_gather(gathered, weights)
    hook = getattr(trainer.strategy.model, "_comm_hooks", None)
    _report(module, same_weights=all(torch.equal(gathered[0], each) for each in gathered), hooks=repr(hook))
