"""``lightning_presets.ray``: presets through Ray Train's documented Lightning recipe, on a real local Ray cluster of
two CPU workers bound to 127.0.0.1 (no dashboard, usage stats off, nothing leaves the machine), one cluster for the
test session. Skipped where Ray Train is not installed (the ``[ray]`` extra; the ``test`` extra installs it)."""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray", reason="Ray Train is the optional [ray] extra (installed by the test extra)")
pytest.importorskip("ray.train.lightning", reason="Ray without its Train library (pip install 'ray[train]')")


@pytest.fixture(scope="module")
def cluster() -> Any:
    """One local Ray cluster for this module's tests, shut down when they end (before the worker's next test files,
    which fork processes of their own)."""
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"  # read by the driver and inherited by every Ray process it starts
    ray.init(num_cpus=2, _node_ip_address="127.0.0.1", include_dashboard=False, log_to_driver=False)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import tests/
    yield ray
    _shut_down()


def _shut_down(timeout_s: float = 60.0) -> None:
    """``ray.shutdown()``, bounded: in a whole-suite run it once waited forever for the driver's listener thread; then
    the processes of the node this driver started are killed and Ray's own exit hook, which would wait the same way
    when the interpreter exits, is taken off."""
    import atexit
    import threading

    stopping = threading.Thread(target=ray.shutdown, daemon=True)
    stopping.start()
    stopping.join(timeout_s)
    if stopping.is_alive():
        atexit.unregister(ray.shutdown)
        node = getattr(ray._private.worker, "_global_node", None)
        if node is not None:
            node.kill_all_processes(check_alive=False, allow_graceful=False)


def _train(config: dict[str, Any]) -> None:
    """Ray's recipe: Trainer(devices='auto', strategy=lightning_presets.ray.strategy(NAME), plugins=
    [RayLightningEnvironment()], callbacks=[RayTrainReportCallback()]) through lightning_presets.ray.prepare_trainer,
    one epoch of 16 indexed samples, for each preset of ``config["presets"]`` in turn on the same workers; what each
    rank saw is written to ``<out>/<preset>-<rank>.json``."""
    for index, preset in enumerate(config["presets"]):
        _train_one(config, preset, index)
    if "page" in config:  # docs/scaling-out.md's example, on the same workers
        page: dict[str, Any] = {"__name__": "scaling_out_example"}
        exec(compile(config["page"], "docs/scaling-out.md", "exec"), page)
        page["train_func"]()


def _train_one(config: dict[str, Any], preset: str, index: int) -> None:
    import warnings

    import lightning.pytorch as pl
    import torch
    from ray.train import get_context
    from ray.train.lightning import RayLightningEnvironment, RayTrainReportCallback
    from torch.utils.data import DataLoader, TensorDataset

    import lightning_presets.ray

    seen: dict[str, Any] = {"indices": [], "losses": []}

    class Model(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.blocks = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(2))
            self.head = torch.nn.Linear(4, 1)

        def forward(self, x: Any) -> Any:
            for block in self.blocks:
                x = torch.relu(block(x))
            return self.head(x)

        def training_step(self, batch: Any, _: int) -> Any:
            ids, features = batch
            seen["indices"] += ids.tolist()
            loss = self(features).pow(2).mean()
            seen["losses"].append(float(loss))
            self.log("preset", float(index))  # in the metrics Ray's report keeps beside each checkpoint
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class TensorParallelModel(Model):
        def configure_model(self) -> None:  # tp2d_hybrid: the blocks split over the tensor dimension, then FSDP2
            from torch.distributed.fsdp import fully_shard
            from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

            for block, plan in zip(self.blocks, (ColwiseParallel(), RowwiseParallel()), strict=True):
                parallelize_module(block, self.device_mesh["tensor_parallel"], plan)
            fully_shard(self, mesh=self.device_mesh["data_parallel"])

    rank = get_context().get_world_rank()
    precision = config.get("precision_by_rank", ["32-true", "32-true"])[rank]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        strategy = lightning_presets.ray.strategy(preset, **config.get("overrides", {}))
        trainer = pl.Trainer(devices="auto", accelerator="cpu", strategy=strategy, max_epochs=1, logger=False,
                             precision=precision, enable_checkpointing=False, enable_progress_bar=False,
                             enable_model_summary=False, plugins=[RayLightningEnvironment()],
                             callbacks=[RayTrainReportCallback()])  # fmt: skip
        trainer = lightning_presets.ray.prepare_trainer(trainer)
        torch.manual_seed(1)
        data = TensorDataset(torch.arange(16), torch.randn(16, 4))
        model = TensorParallelModel() if preset == "tp2d_hybrid" else Model()
        trainer.fit(model, train_dataloaders=DataLoader(data, batch_size=4))
    weights = {
        name: (value.full_tensor() if hasattr(value, "full_tensor") else value).flatten().tolist()
        for name, value in model.state_dict().items()
    }  # FSDP2's DTensors gathered on every rank
    context = trainer.strategy._lp_context
    seen |= {
        "world": [context.world_size, context.devices_per_node, context.num_nodes],
        "findings": sorted({str(each.message.finding) for each in caught if hasattr(each.message, "finding")}),
        "sampler": trainer.strategy.distributed_sampler_kwargs,
        "root_device": str(trainer.strategy.root_device),
        "weights": weights,
    }
    Path(config["out"], f"{preset}-{rank}.json").write_text(json.dumps(seen))


def _fit(presets: list[str], out: Path, **config: Any) -> Any:
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    trainer = TorchTrainer(_train, train_loop_config={"presets": presets, "out": str(out), **config},
                           scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
                           run_config=RunConfig(storage_path=str(out / "ray"), name="job"))  # fmt: skip
    return trainer.fit()


def _loaded(checkpoint: Any, tmp_path: Path) -> dict[str, Any]:
    """The LightningModule's weights in the checkpoint Ray's report kept: Lightning's file, or (a sharded strategy)
    the distributed checkpoint every worker wrote into it, converted by torch's own ``dcp_to_torch_save``."""
    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    path = Path(checkpoint.path, "checkpoint.ckpt")
    if path.is_dir():
        dcp_to_torch_save(path, tmp_path / "converted.pt")
        path = tmp_path / "converted.pt"
    loaded = torch.load(path, map_location="cpu", weights_only=False)
    state = loaded["state_dict"] if "state_dict" in loaded else loaded["model"]
    return {name: value.flatten().tolist() for name, value in state.items()}


PRESETS = ["ddp_static_graph", "fsdp2", "tp2d_hybrid"]
PAGE = Path(__file__).resolve().parents[1] / "docs" / "scaling-out.md"


def page_example() -> str:
    """The Python example of the page's Ray section."""
    section = PAGE.read_text(encoding="utf-8").partition("## Ray Train")[2]
    return section.partition("```python\n")[2].partition("```")[0]


@pytest.fixture(scope="module")
def trained(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """One Ray job of two workers that trains each of :data:`PRESETS` in turn, then runs the page's example (one set
    of workers for all)."""
    out = tmp_path_factory.mktemp("ray-trained")
    return out, _fit(PRESETS, out, page=page_example())


@pytest.mark.parametrize("preset", PRESETS)
def test_a_preset_trains_under_rays_recipe(trained: tuple[Path, Any], tmp_path: Path, preset: str) -> None:
    """Two workers, devices='auto' (one CPU each): both train, the loss is finite, the weights end equal on both, each
    worker reads its own half of the data (tp2d_hybrid: both ranks of its tensor-parallel group read the same batches,
    on a mesh of 1 × 2 laid on Ray's 2 workers), Ray's reported checkpoint loads with those weights, and the guards
    read Ray's layout (2 workers on 1 node), so no finding describes a one-process job."""
    out, result = trained
    seen = [json.loads((out / f"{preset}-{rank}.json").read_text()) for rank in (0, 1)]
    assert [each["world"] for each in seen] == [[2, 2, 1]] * 2
    assert all(each["losses"] and all(math.isfinite(loss) for loss in each["losses"]) for each in seen), seen
    assert seen[0]["weights"] == seen[1]["weights"]
    if preset == "tp2d_hybrid":
        assert [each["sampler"] for each in seen] == [{"num_replicas": 1, "rank": 0}] * 2
        assert seen[0]["indices"] == seen[1]["indices"]  # in the order of the sampler's seed
        assert sorted(seen[0]["indices"]) == list(range(16))
    else:
        assert [each["sampler"] for each in seen] == [{"num_replicas": 2, "rank": 0}, {"num_replicas": 2, "rank": 1}]
        assert not set(seen[0]["indices"]) & set(seen[1]["indices"])
        assert sorted(seen[0]["indices"] + seen[1]["indices"]) == list(range(16))
    assert [each["root_device"] for each in seen] == ["cpu", "cpu"]
    one_process = [finding for each in seen for finding in each["findings"] if "devices=1" in finding]
    assert not one_process, one_process
    index = PRESETS.index(preset)
    reported = [checkpoint for checkpoint, metrics in result.best_checkpoints if metrics.get("preset") == index]
    assert len(reported) == 1, result.best_checkpoints
    assert _loaded(reported[0], tmp_path) == seen[0]["weights"]


def test_the_pages_example_trains_under_ray(trained: tuple[Path, Any]) -> None:
    """docs/scaling-out.md's Ray example (fsdp2 through lightning_presets.ray) ran on the same two workers: its
    checkpoint is the job's last report."""
    _, result = trained
    assert "lightning_presets.ray.strategy(" in page_example()
    assert len(result.best_checkpoints) == len(PRESETS) + 1
    assert "preset" not in result.best_checkpoints[-1][1]
    assert (Path(result.checkpoint.path) / "checkpoint.ckpt").is_dir()  # FSDP2's sharded checkpoint, both workers'


def _driver_error(presets: list[str], tmp_path: Path, **config: Any) -> str:
    from ray.train import TrainingFailedError

    with pytest.raises(TrainingFailedError, match=r"\[LP\d{3}\]") as failed:  # Ray's, holding its workers' errors
        _fit(presets, tmp_path, **config)
    return str(failed.value)


def test_a_refusal_under_ray_reaches_the_driver_with_its_code_and_fix(cluster: Any, tmp_path: Path) -> None:
    """fsdp2's data_parallel_size=4 on Ray's 2 workers (LP211: the guards read Ray's world) is refused in each worker;
    the error the driver gets holds the code, the message and the fix within the last 500 characters Ray keeps of a
    worker's error."""
    text = _driver_error(["fsdp2"], tmp_path, overrides={"data_parallel_size": 4})
    tail = text[-500:]
    assert "[LP211]" in tail, text[-1500:]
    assert "data_parallel_size=4 × tensor_parallel_size=1 = 4, but the world size is" in tail
    assert "| fix: valid (data, tensor) splits for 2 device(s)" in tail


def test_ranks_that_disagree_under_ray_are_caught(cluster: Any, tmp_path: Path) -> None:
    """One worker in bf16-mixed, the other in 32-true: the start-up handshake refuses the job (LP030) on the driver."""
    text = _driver_error(["ddp_static_graph"], tmp_path, precision_by_rank=["32-true", "bf16-mixed"])
    assert "[LP030]" in text[-500:], text[-1500:]


def test_prepare_trainer_checks_the_presets_classes_as_ray_checks_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside a Ray job (no cluster): a preset on RayModelParallel without Ray's environment is refused by this
    package's prepare_trainer, naming the plugin to pass; a preset on Ray's own class goes to Ray's prepare_trainer,
    whose refusal it is."""
    import lightning.pytorch as pl

    import lightning_presets.ray

    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    for preset, refusal in (("fsdp2", "pass plugins=\\[ray.train.lightning.RayLightningEnvironment\\(\\)\\]"),
                            ("ddp_static_graph", "Invalid cluster environment plugin")):  # fmt: skip
        trainer = pl.Trainer(strategy=lightning_presets.ray.strategy(preset), accelerator="cpu", devices=2,
                             logger=False, enable_progress_bar=False)  # fmt: skip
        with pytest.raises(RuntimeError, match=refusal):
            lightning_presets.ray.prepare_trainer(trainer)
