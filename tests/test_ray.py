"""``lightning_presets.ray``: presets through Ray Train's documented Lightning recipe, on a real local Ray cluster of
two CPU workers bound to 127.0.0.1 (one cluster for the module). Skipped where Ray is not installed (it is the
optional ``[ray]`` extra, not part of ``[test]``)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("ray.train.lightning")


@pytest.fixture(scope="module")
def cluster() -> Any:
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    ray.init(num_cpus=2, _node_ip_address="127.0.0.1", include_dashboard=False, log_to_driver=False)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import tests/
    yield ray
    ray.shutdown()


def _train(config: dict[str, Any]) -> None:
    """Ray's recipe: Trainer(devices='auto', strategy=<Ray strategy>, plugins=[RayLightningEnvironment()], callbacks=
    [RayTrainReportCallback()]) through prepare_trainer, two steps; what the guards saw is written per rank."""
    import warnings

    import lightning.pytorch as pl
    import torch
    from ray.train.lightning import RayLightningEnvironment, RayTrainReportCallback, prepare_trainer
    from torch.utils.data import DataLoader, TensorDataset

    import lightning_presets.ray

    class Model(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch: Any, _: int) -> Any:
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        strategy = lightning_presets.ray.strategy(config["preset"], **config.get("overrides", {}))
        trainer = pl.Trainer(devices="auto", accelerator="cpu", strategy=strategy, max_steps=2, logger=False,
                             enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                             plugins=[RayLightningEnvironment()], callbacks=[RayTrainReportCallback()])  # fmt: skip
        trainer = prepare_trainer(trainer)
        data = DataLoader(TensorDataset(torch.randn(16, 4)), batch_size=4)
        trainer.fit(Model(), train_dataloaders=data)
    codes = sorted({each.message.finding.code for each in caught if hasattr(each.message, "finding")})
    seen = {"world": trainer.strategy._lp_context.world_size, "codes": codes, "steps": trainer.global_step}
    Path(config["out"], f"{trainer.global_rank}.json").write_text(json.dumps(seen))


def _fit(preset: str, out: Path, **overrides: Any) -> Any:
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    trainer = TorchTrainer(_train, train_loop_config={"preset": preset, "out": str(out), "overrides": overrides},
                           scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
                           run_config=RunConfig(storage_path=str(out / "ray")))  # fmt: skip
    return trainer.fit()


def test_a_preset_trains_under_rays_recipe_and_its_guards_see_rays_world(cluster: Any, tmp_path: Path) -> None:
    """Two workers, devices='auto' (one CPU each): the guards read Ray's world of 2, so no 'one process in total'
    (LP305), and both ranks train."""
    _fit("ddp_static_graph", tmp_path)
    seen = [json.loads((tmp_path / f"{rank}.json").read_text()) for rank in (0, 1)]
    assert [each["world"] for each in seen] == [2, 2]
    assert all("LP305" not in each["codes"] for each in seen), seen
    assert [each["steps"] for each in seen] == [2, 2]


def test_a_refusal_under_ray_shows_its_code_in_what_the_driver_sees(cluster: Any, tmp_path: Path) -> None:
    """An unknown override is refused in the worker; the error the driver gets names the code within Ray's first or
    last 500 characters."""
    with pytest.raises(Exception, match="LP006") as failed:  # Ray's own error type, from its worker
        _fit("ddp_static_graph", tmp_path, no_such_option=1)
    text = str(failed.value)
    assert "LP006" in text[:500] + text[-500:], text[-1500:]
