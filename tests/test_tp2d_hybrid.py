"""``tp2d_hybrid``: its guards (LP201-LP208), its construction in the four namespaces, and real
2-process training on CPU with gloo through the Trainer and Fabric (``tests/scripts/train_tp2d.py``).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import re
import subprocess
import sys
import traceback
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# Every namespace imported before the first simulated_cuda() (see the note in test_fsdp_offload_ckpt.py).
import lightning_fabric  # noqa: F401
import pytest
import pytorch_lightning  # noqa: F401
import torch
from lightning.pytorch import LightningModule, Trainer
from torch import nn

import lightning_presets
from harness import Job, run_job
from helpers import QUIET, context
from lightning_presets import Context, Options, PresetConfigError, PresetWarning
from lightning_presets.strategies.model_parallel import rules as mp
from lightning_presets.tools.examples import check_examples
from lightning_presets.tools.simulation import SimulatedGPU
from models import TinyTransformer, parallelize

PRESET = "tp2d_hybrid"
ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "scripts" / "train_tp2d.py"
CPU_CONTEXT = context(
    PRESET,
    {"data_parallel_size": "auto", "tensor_parallel_size": "auto"},
    accelerator="cpu",
    devices_per_node=2,
    precision="32-true",
    precision_plugin="Precision",
)
# Variables Lightning's launcher writes into os.environ; a child that inherits them would wait for peers.
LAUNCH_VARIABLES = ("LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "GLOBAL_RANK", "MASTER_ADDR", "MASTER_PORT", "RANK")


def ctx(data: Any = "auto", tensor: Any = "auto", **changes: Any) -> Context:
    options = {**CPU_CONTEXT.options, "data_parallel_size": data, "tensor_parallel_size": tensor}
    return dataclasses.replace(CPU_CONTEXT, options=options, **changes)


def options(**values: Any) -> Options:
    return Options(preset=PRESET, target="trainer", values=values, overrides=values)


def keep_model(module: nn.Module, device_mesh: Any) -> nn.Module:
    return module


class WithConfigureModel(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.model = TinyTransformer(n_layers=1)

    def configure_model(self) -> None:
        parallelize(self.model, self.device_mesh)


class WithoutConfigureModel(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 1)

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        return self.layer(batch).sum()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class InheritsConfigureModel(WithConfigureModel):
    pass


# ---------------------------------------------------------------------------------------------- rules


def test_lp201_rejects_sizes_that_miss_the_world_size_and_shows_the_arithmetic() -> None:
    finding = mp.sizes_match_world(ctx(data=2, tensor=2))
    assert finding is not None
    assert (finding.code, finding.severity) == ("LP201", "error")
    assert "data_parallel_size=2 × tensor_parallel_size=2 = 4" in finding.message
    assert "devices=2 × num_nodes=1 = 2" in finding.message
    assert "valid (data, tensor) splits for 2 device(s): (2, 1), (1, 2)" in finding.hint


def test_lp201_marks_auto_sizes() -> None:
    finding = mp.sizes_match_world(ctx(data=3, tensor="auto", devices_per_node=4, num_nodes=2))
    assert finding is not None
    assert "data_parallel_size=3 × tensor_parallel_size=4 (auto) = 12" in finding.message
    assert "(2, 4)" in finding.hint


@pytest.mark.parametrize(
    ("data", "tensor", "devices", "nodes"),
    [("auto", "auto", 2, 1), (1, 2, 2, 1), (2, 1, 2, 1), (2, "auto", 1, 2), ("auto", "auto", 8, 2)],
)
def test_lp201_accepts_sizes_that_make_the_world_size(data: Any, tensor: Any, devices: int, nodes: int) -> None:
    assert mp.sizes_match_world(ctx(data=data, tensor=tensor, devices_per_node=devices, num_nodes=nodes)) is None


@pytest.mark.parametrize(
    ("values", "bad"),
    [
        ({"tensor_parallel_size": 0}, "tensor_parallel_size"),
        ({"data_parallel_size": -2}, "data_parallel_size"),
        ({"data_parallel_size": "2"}, "data_parallel_size"),
        ({"tensor_parallel_size": 2.0}, "tensor_parallel_size"),
        ({"tensor_parallel_size": True}, "tensor_parallel_size"),
    ],
)
def test_lp202_rejects_sizes_that_are_not_auto_or_positive_integers(values: dict[str, Any], bad: str) -> None:
    finding = mp.sizes_are_positive(options(**values))
    assert finding is not None
    assert finding.code == "LP202"
    assert f"{bad}={values[bad]!r}" in finding.message
    assert "'auto'" in finding.hint


@pytest.mark.parametrize(
    "values", [{}, {"data_parallel_size": "auto", "tensor_parallel_size": 2}, {"data_parallel_size": 4}]
)
def test_lp202_accepts_auto_and_positive_integers(values: dict[str, Any]) -> None:
    assert mp.sizes_are_positive(options(**values)) is None


def test_lp203_rejects_tensor_size_that_does_not_divide_devices_per_node() -> None:
    finding = mp.tp_divides_devices_per_node(ctx(data=4, tensor=3, devices_per_node=4, num_nodes=3))
    assert finding is not None
    assert finding.code == "LP203"
    assert "tensor_parallel_size=3" in finding.message
    assert "4 devices per node" in finding.message
    assert "(12, 1), (6, 2), (3, 4)" in finding.hint


def test_lp203_accepts_tensor_size_that_divides_devices_per_node() -> None:
    assert mp.tp_divides_devices_per_node(ctx(data=4, tensor=3, devices_per_node=3, num_nodes=4)) is None


def test_lp204_warns_when_tensor_groups_span_nodes() -> None:
    finding = mp.tp_stays_in_node(ctx(data=1, tensor=16, devices_per_node=8, num_nodes=2))
    assert finding is not None
    assert (finding.code, finding.severity) == ("LP204", "warning")
    assert "tensor_parallel_size=16" in finding.message
    assert "tensor_parallel_size=8 and data_parallel_size=2" in finding.hint


def test_lp204_accepts_tensor_groups_inside_a_node() -> None:
    assert mp.tp_stays_in_node(ctx(data=2, tensor=8, devices_per_node=8, num_nodes=2)) is None


@pytest.mark.parametrize("precision", ["16-mixed", "transformer-engine", "transformer-engine-float16"])
def test_lp205_rejects_precision_outside_model_parallel(precision: str) -> None:
    finding = mp.model_parallel_precision(ctx(precision=precision))
    assert finding is not None
    assert finding.code == "LP205"
    assert f"precision={precision!r}" in finding.message
    assert all(repr(choice) in finding.hint for choice in mp.MODEL_PARALLEL_PRECISIONS)


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed", "bf16-true", "16-true", "64-true"])
def test_lp205_accepts_model_parallel_precisions(precision: str) -> None:
    assert mp.model_parallel_precision(ctx(precision=precision)) is None


@pytest.mark.parametrize("accelerator", ["mps", "xla", "toy"])
def test_lp206_rejects_accelerators_other_than_cpu_and_cuda(accelerator: str) -> None:
    finding = mp.model_parallel_accelerator(ctx(accelerator=accelerator))
    assert finding is not None
    assert finding.code == "LP206"
    assert f"accelerator={accelerator!r}" in finding.message


@pytest.mark.parametrize("accelerator", ["cpu", "cuda"])
def test_lp206_accepts_cpu_and_cuda(accelerator: str) -> None:
    assert mp.model_parallel_accelerator(ctx(accelerator=accelerator)) is None


def test_lp207_rejects_fabric_without_parallelize_fn_and_shows_the_call() -> None:
    finding = mp.fabric_has_parallelize_fn(ctx(kind="fabric", target="fabric"))
    assert finding is not None
    assert finding.code == "LP207"
    assert "`Fabric(strategy='tp2d_hybrid')`" in finding.message
    assert "lightning_presets.strategy('tp2d_hybrid', target='fabric', parallelize_fn=parallelize)" in finding.hint


def test_lp207_accepts_fabric_with_parallelize_fn_and_any_trainer() -> None:
    with_fn = dataclasses.replace(ctx(kind="fabric", target="fabric"), options={"parallelize_fn": keep_model})
    assert mp.fabric_has_parallelize_fn(with_fn) is None
    assert mp.fabric_has_parallelize_fn(ctx(kind="trainer")) is None


def test_lp208_rejects_a_lightning_module_without_configure_model() -> None:
    finding = mp.model_has_configure_model(ctx(), WithoutConfigureModel())
    assert finding is not None
    assert finding.code == "LP208"
    assert "WithoutConfigureModel does not override configure_model()" in finding.message
    assert "configure_model(self)" in finding.hint


@pytest.mark.parametrize("model", [WithConfigureModel, InheritsConfigureModel])
def test_lp208_accepts_configure_model_also_inherited(model: type[LightningModule]) -> None:
    assert mp.model_has_configure_model(ctx(), model()) is None


def test_lp208_does_not_apply_to_fabric() -> None:
    assert mp.model_has_configure_model(ctx(kind="fabric", target="fabric"), nn.Linear(2, 2)) is None


# ------------------------------------------------------------------------------------------ construction

TRAINER_NAMESPACES = [("trainer", "lightning.pytorch"), ("pytorch_lightning", "pytorch_lightning")]
FABRIC_NAMESPACES = [("fabric", "lightning.fabric"), ("lightning_fabric", "lightning_fabric")]


@pytest.mark.parametrize(("target", "package"), TRAINER_NAMESPACES, ids=[t for t, _ in TRAINER_NAMESPACES])
def test_trainer_by_name_on_cpu(target: str, package: str) -> None:
    trainer = importlib.import_module(package).Trainer(strategy=PRESET, accelerator="cpu", devices=2, **QUIET)
    strategy = trainer.strategy
    assert isinstance(strategy, importlib.import_module(f"{package}.strategies").ModelParallelStrategy)
    assert (strategy._data_parallel_size, strategy._tensor_parallel_size) == ("auto", "auto")
    assert strategy.world_size == 2
    assert strategy._lp_context.target == target
    assert (strategy._lp_context.accelerator, strategy._lp_context.devices_per_node) == ("cpu", 2)


@pytest.mark.parametrize(("target", "package"), FABRIC_NAMESPACES, ids=[t for t, _ in FABRIC_NAMESPACES])
def test_fabric_with_parallelize_fn_on_cpu(target: str, package: str) -> None:
    strategy = lightning_presets.strategy(PRESET, target=target, parallelize_fn=keep_model, tensor_parallel_size=2)
    fabric = importlib.import_module(package).Fabric(strategy=strategy, accelerator="cpu", devices=2)
    assert fabric._strategy is strategy
    assert isinstance(strategy, importlib.import_module(f"{package}.strategies").ModelParallelStrategy)
    assert strategy._parallelize_fn is keep_model
    assert strategy._tensor_parallel_size == 2


@pytest.mark.parametrize(("target", "package"), FABRIC_NAMESPACES, ids=[t for t, _ in FABRIC_NAMESPACES])
def test_lp207_fabric_by_name(target: str, package: str) -> None:
    with pytest.raises(PresetConfigError) as raised:
        importlib.import_module(package).Fabric(strategy=PRESET, accelerator="cpu", devices=2)
    assert raised.value.codes == ("LP207",)
    assert f"lightning_presets.strategy('tp2d_hybrid', target={target!r}, parallelize_fn=" in str(raised.value)


def test_lp201_at_construction_before_any_process_starts() -> None:
    strategy = lightning_presets.strategy(PRESET, data_parallel_size=2, tensor_parallel_size=2)
    with pytest.raises(PresetConfigError) as raised:
        Trainer(strategy=strategy, accelerator="cpu", devices=2, **QUIET)
    assert raised.value.codes == ("LP201",)
    assert "= 4, but the world size is devices=2 × num_nodes=1 = 2" in str(raised.value)
    assert not torch.distributed.is_initialized()


def test_lp201_neighbour_constructs() -> None:
    strategy = lightning_presets.strategy(PRESET, data_parallel_size=2, tensor_parallel_size=1)
    assert Trainer(strategy=strategy, accelerator="cpu", devices=2, **QUIET).strategy is strategy


@pytest.mark.parametrize("target", ["trainer", "fabric", "pytorch_lightning", "lightning_fabric"])
def test_lp202_when_the_strategy_is_built(target: str) -> None:
    fabric_only = {"parallelize_fn": keep_model} if "fabric" in target else {}
    with pytest.raises(PresetConfigError) as raised:
        lightning_presets.strategy(PRESET, target=target, tensor_parallel_size=0, **fabric_only)
    assert raised.value.codes == ("LP202",)


def test_lp203_warns_on_simulated_cuda(cuda8: SimulatedGPU) -> None:
    """Tensor groups that straddle nodes unevenly are slow, not broken (formerly an error)."""
    strategy = lightning_presets.strategy(PRESET, data_parallel_size=4, tensor_parallel_size=3)
    with pytest.warns(PresetWarning) as caught:
        Trainer(strategy=strategy, accelerator="cuda", devices=4, num_nodes=3, **QUIET)
    assert [w.message.finding.code for w in caught if isinstance(w.message, PresetWarning)] == ["LP203"]


def test_lp203_the_issues_two_by_twelve_on_three_nodes_of_eight_is_accepted_with_a_warning(
    cuda8: SimulatedGPU,
) -> None:
    strategy = lightning_presets.strategy(PRESET, data_parallel_size=2, tensor_parallel_size=12)
    with pytest.warns(PresetWarning, match="LP203"):
        trainer = Trainer(strategy=strategy, accelerator="cuda", devices=8, num_nodes=3, **QUIET)
    assert trainer.strategy._lp_context.world_size == 24


def test_lp203_neighbour_on_simulated_cuda(cuda8: SimulatedGPU) -> None:
    """Tensor groups of 3 on nodes of 3 devices: no warning at all (an LP203 here fails the test)."""
    strategy = lightning_presets.strategy(PRESET, data_parallel_size=4, tensor_parallel_size=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PresetWarning)
        trainer = Trainer(strategy=strategy, accelerator="cuda", devices=3, num_nodes=4, **QUIET)
    assert mp.resolved_sizes(trainer.strategy._lp_context) == (4, 3)


@pytest.mark.parametrize(("target", "package"), TRAINER_NAMESPACES + FABRIC_NAMESPACES)
def test_constructs_in_every_namespace_on_simulated_cuda(cuda8: SimulatedGPU, target: str, package: str) -> None:
    """By name in the Trainer; with a parallelize_fn in Fabric (which needs one): one node of 8, a (1, 8) mesh."""
    module = importlib.import_module(package)
    if hasattr(module, "Trainer"):
        strategy = module.Trainer(strategy=PRESET, accelerator="cuda", devices=8, **QUIET).strategy
    else:
        strategy = lightning_presets.strategy(PRESET, target=target, parallelize_fn=keep_model)
        module.Fabric(strategy=strategy, accelerator="cuda", devices=8)
    assert isinstance(strategy, importlib.import_module(f"{package}.strategies").ModelParallelStrategy)
    assert strategy._lp_context.target == target
    assert (strategy._lp_context.accelerator, strategy._lp_context.world_size) == ("cuda", 8)
    assert mp.resolved_sizes(strategy._lp_context) == (1, 8)


def test_lp204_warns_on_simulated_cuda(cuda8: SimulatedGPU) -> None:
    strategy = lightning_presets.strategy(PRESET, data_parallel_size=1, tensor_parallel_size=16)
    with pytest.warns(PresetWarning, match="LP204"):
        Trainer(strategy=strategy, accelerator="cuda", devices=8, num_nodes=2, **QUIET)


def test_lp204_neighbour_auto_split_does_not_warn(cuda8: SimulatedGPU) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", PresetWarning)
        trainer = Trainer(strategy=PRESET, accelerator="cuda", devices=8, num_nodes=2, **QUIET)
    assert mp.resolved_sizes(trainer.strategy._lp_context) == (2, 8)


@pytest.mark.parametrize(("accelerator", "precision"), [("cuda", "16-mixed")])
def test_lp205_in_the_trainer(cuda8: SimulatedGPU, accelerator: str, precision: str) -> None:
    """Lightning's Trainer does not check precision for a strategy given by name; the preset does."""
    with pytest.raises(PresetConfigError) as raised:
        Trainer(strategy=PRESET, accelerator=accelerator, devices=2, precision=precision, **QUIET)
    assert [each.code for each in raised.value.findings if not each.conditional] == ["LP205"]
    assert f"precision={precision!r}" in str(raised.value)


def test_lp205_cpu_16_mixed_becomes_bf16_mixed_in_lightning_before_the_guard() -> None:
    """On CPU, Lightning itself swaps 16-mixed for bf16-mixed (with a warning), which the preset accepts."""
    with pytest.warns(UserWarning, match="AMP with fp16 is not supported on CPU"):
        trainer = Trainer(strategy=PRESET, accelerator="cpu", devices=2, precision="16-mixed", **QUIET)
    assert trainer.strategy._lp_context.precision == "bf16-mixed"


@pytest.mark.parametrize("precision", ["bf16-mixed", "bf16-true"])
def test_lp205_neighbours_in_the_trainer(precision: str) -> None:
    trainer = Trainer(strategy=PRESET, accelerator="cpu", devices=2, precision=precision, **QUIET)
    assert trainer.strategy.precision_plugin.precision == precision


def test_lp205_in_fabric_lightnings_own_check_fires_first(cuda8: SimulatedGPU) -> None:
    """What a Fabric user sees: Fabric's own ModelParallel precision check, before the preset's."""
    from lightning.fabric import Fabric

    strategy = lightning_presets.strategy(PRESET, target="fabric", parallelize_fn=keep_model)
    with pytest.raises(ValueError, match=re.escape("does not support `Fabric(..., precision='16-mixed')`")) as raised:
        Fabric(strategy=strategy, accelerator="cuda", devices=2, precision="16-mixed")
    assert not isinstance(raised.value, PresetConfigError)


class ToyAccelerator:
    """Built on demand: an accelerator that is neither CPU nor CUDA, with CPU devices underneath."""

    @staticmethod
    def make() -> Any:
        from lightning.pytorch.accelerators import Accelerator

        class ToyAccelerator(Accelerator):
            def setup_device(self, device: torch.device) -> None:
                pass

            def teardown(self) -> None:
                pass

            @staticmethod
            def parse_devices(devices: Any) -> int:
                return int(devices)

            @staticmethod
            def get_parallel_devices(devices: Any) -> list[torch.device]:
                return [torch.device("cpu")] * int(devices)

            @staticmethod
            def auto_device_count() -> int:
                return 1

            @staticmethod
            def is_available() -> bool:
                return True

            def get_device_stats(self, device: Any) -> dict[str, Any]:
                return {}

            @classmethod
            def name(cls) -> str:
                return "toy"

        return ToyAccelerator()


def test_lp206_at_construction_with_a_foreign_accelerator() -> None:
    with pytest.raises(PresetConfigError) as raised:
        Trainer(strategy=PRESET, accelerator=ToyAccelerator.make(), devices=2, **QUIET)
    assert raised.value.codes == ("LP206",)
    assert "accelerator='toy'" in str(raised.value)


def test_lp206_neighbour_a_cpu_accelerator_subclass_is_cpu() -> None:
    from lightning.pytorch.accelerators import CPUAccelerator

    class MyCPUAccelerator(CPUAccelerator):
        pass

    trainer = Trainer(strategy=PRESET, accelerator=MyCPUAccelerator(), devices=2, **QUIET)
    assert trainer.strategy._lp_context.accelerator == "cpu"


@pytest.fixture
def restore_environ() -> Iterator[None]:
    """Trainer.fit's launcher writes rank variables into os.environ; put everything back."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


def test_lp208_fit_fails_in_connect_before_the_process_group(restore_environ: None) -> None:
    trainer = Trainer(strategy=PRESET, accelerator="cpu", devices=1, max_steps=1, **QUIET)
    data = torch.utils.data.DataLoader(torch.randn(4, 4), batch_size=2)
    with pytest.raises(PresetConfigError) as raised:
        trainer.fit(WithoutConfigureModel(), data)
    assert raised.value.codes == ("LP208",)
    assert "`Trainer(strategy='tp2d_hybrid')`: WithoutConfigureModel does not override" in str(raised.value)
    frames = [frame.name for frame in traceback.extract_tb(raised.value.__traceback__)]
    assert "connect" in frames
    assert "setup_environment" not in frames
    assert not torch.distributed.is_initialized()


def test_lp208_neighbour_connect_accepts_configure_model() -> None:
    trainer = Trainer(strategy=PRESET, accelerator="cpu", devices=1, **QUIET)
    model = WithConfigureModel()
    trainer.strategy.connect(model)
    assert trainer.strategy.model is model


# ------------------------------------------------------------- the documented examples of every rule


def test_documented_examples_fail_and_pass() -> None:
    """Every rule's ``fails`` example raises or warns its code and ``fixed`` does not (MPS through a stand-in)."""
    report = check_examples(PRESET)
    assert report.checked == 2 * len(lightning_presets.get_preset(PRESET).rules)
    assert report.failures == ()


# ---------------------------------------------------------------- real 2-process training on CPU (gloo)


def run_script(
    *args: str, timeout: float = 120, launcher: str = "fork", env: dict[str, str] | None = None
) -> tuple[dict[str, Any], Job]:
    """Run the script on 2 ranks (forked by the harness, or ``launcher="fresh"``: as a file, Lightning re-runs it
    for rank 1) and parse rank 0's ``RESULT`` line."""
    job = run_job(*args, env={"PYTHONWARNINGS": "ignore", **(env or {})}, cwd=ROOT, timeout=timeout, launcher=launcher)
    assert job.returncode == 0, job.describe()
    lines = [line for line in job.stdout.splitlines() if line.startswith("RESULT ")]
    assert len(lines) == 1, job.describe()
    return json.loads(lines[0].removeprefix("RESULT ")), job


def check_training(result: dict[str, Any], mesh_shape: list[int], *, forked: bool = True) -> None:
    """Both ranks trained: finite, decreasing losses that start at the single-process reference. A forked rank comes
    from the harness's server, which imported the package before the script ran; a fresh one did not."""
    ranks = result["ranks"]
    assert [rank["rank"] for rank in ranks] == [0, 1]
    for rank in ranks:
        # every process, rank 1 included (started by Lightning's launcher), built the preset's class
        assert rank["strategy_class"] == "lightning_presets.ModelParallelStrategy"
        assert rank["preset"] == "tp2d_hybrid"
        assert rank["lightning_presets_loaded_at_start"] is forked
        assert rank["world_size"] == 2
        assert rank["backend"] == "gloo"
        assert rank["mesh_dims"] == ["data_parallel", "tensor_parallel"]
        assert rank["mesh_shape"] == mesh_shape
        losses = rank["losses"]
        assert len(losses) == 8
        assert all(map(torch.isfinite, torch.tensor(losses)))
        assert losses[-1] < 0.75 * losses[0], losses
        # step 0 of the sharded model equals the unsharded copy on the same batch: the sharding is correct
        assert losses[0] == pytest.approx(rank["reference_loss"], rel=1e-4)


def check_tensor_parallel_layout(result: dict[str, Any]) -> None:
    """1 × 2: each rank holds half of every tensor-parallel weight, on the 2D mesh."""
    ranks = result["ranks"]
    assert [(rank["data_rank"], rank["tensor_rank"]) for rank in ranks] == [(0, 0), (0, 1)]
    assert ranks[0]["losses"] == ranks[1]["losses"]  # one data-parallel group: both see the same batches
    for rank in ranks:
        q, o, bias = (
            rank["layout"][name]
            for name in ("layers.0.attn.q.weight", "layers.0.attn.o.weight", "layers.0.ffn.up.bias")
        )
        for param in (q, o, bias):
            assert param["dtensor"] is True
            assert param["mesh_dims"] == ["data_parallel", "tensor_parallel"]
        assert (q["placements"][1], q["global_shape"], q["local_shape"]) == ("S(0)", [32, 32], [16, 32])  # colwise
        assert (o["placements"][1], o["global_shape"], o["local_shape"]) == ("S(1)", [32, 32], [32, 16])  # rowwise
        assert (bias["global_shape"], bias["local_shape"]) == ([128], [64])
        embedding = rank["layout"]["embedding.weight"]  # not tensor-parallel: FSDP2 over a data mesh of 1
        assert (embedding["mesh_dims"], embedding["local_shape"]) == (["data_parallel"], [32, 32])


@pytest.mark.distributed
def test_trainer_by_name_trains_tensor_parallel_1x2_with_autoload_only() -> None:
    # a fresh interpreter, as users start it: the start-up hook alone registers the name, in both ranks
    result, _ = run_script(str(SCRIPT), "--api", "trainer", launcher="fresh", env={"LIGHTNING_PRESETS_AUTOLOAD": "1"})
    assert result["script_imported_lightning_presets"] is False
    assert result["strategy_class"] == "lightning_presets.ModelParallelStrategy"
    assert result["lightning_base"] == "lightning.pytorch.strategies.model_parallel.ModelParallelStrategy"
    check_training(result, mesh_shape=[1, 2], forked=False)
    check_tensor_parallel_layout(result)


@pytest.mark.distributed
def test_the_name_resolves_through_the_start_up_hook_only() -> None:
    """Control for the run above: with the hook off and no import, Lightning does not know the name. A fresh
    interpreter: the start-up hook is what is tested."""
    env = {key: value for key, value in os.environ.items() if key not in LAUNCH_VARIABLES}
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--api", "trainer"],
        capture_output=True,
        text=True,
        env={**env, "LIGHTNING_PRESETS_AUTOLOAD": "0"},
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert result.returncode != 0
    assert "invalid strategy name" in result.stderr
    assert "RESULT" not in result.stdout


@pytest.mark.distributed
def test_trainer_trains_data_parallel_2x1() -> None:
    result, _ = run_script(str(SCRIPT), "--api", "trainer", "--split", "2x1")
    check_training(result, mesh_shape=[2, 1])
    ranks = result["ranks"]
    assert [(rank["data_rank"], rank["tensor_rank"]) for rank in ranks] == [(0, 0), (1, 0)]
    assert ranks[0]["losses"][0] != ranks[1]["losses"][0]  # two data-parallel ranks: different batches
    for rank in ranks:
        for name in ("embedding.weight", "layers.0.attn.q.weight", "layers.0.attn.o.weight"):
            param = rank["layout"][name]
            assert param["dtensor"] is True
            assert param["placements"][0] == "S(0)"  # FSDP2 shards dim 0 over the data-parallel dimension
            assert param["local_shape"] == [16, 32]


@pytest.mark.distributed
def test_fabric_trains_tensor_parallel_1x2_with_parallelize_fn() -> None:
    result, _ = run_script(str(SCRIPT), "--api", "fabric")
    assert result["strategy_class"] == "lightning_presets.ModelParallelStrategy"
    check_training(result, mesh_shape=[1, 2])
    check_tensor_parallel_layout(result)


@pytest.mark.distributed
def test_fabric_trains_data_parallel_2x1() -> None:
    result, _ = run_script(str(SCRIPT), "--api", "fabric", "--split", "2x1")
    check_training(result, mesh_shape=[2, 1])
    assert [rank["data_rank"] for rank in result["ranks"]] == [0, 1]


@pytest.mark.distributed
def test_quickstart_runs_end_to_end() -> None:
    # its ranks forked by the harness; CI's first leg runs it as the README says, through Lightning's launcher
    result = run_job(ROOT / "examples" / "quickstart.py", cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.describe()
    out = result.stdout
    assert "trained with ModelParallelStrategy on 2 CPU processes" in out
    assert "{'data_parallel': 1, 'tensor_parallel': 2}" in out
    first, last = (
        float(value) for value in out.split("mean loss, first epoch ")[1].split("\n")[0].split(" -> last epoch ")
    )
    assert last < first
    assert "rejected while Trainer(...) was constructed, codes ['LP101']" in out
    assert out.count("[LP101]") == 1  # shown once, by rank 0
    assert "returned a view tensor" not in out  # torch's "wrong gradients" warning about FSDP2 outputs (any stream)
