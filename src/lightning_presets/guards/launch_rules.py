"""Rules every strategy preset gets about how the job is launched: what Lightning's launcher checks only at ``fit``."""

from __future__ import annotations

from lightning_presets.core.codes import Setting
from lightning_presets.core.context import Context
from lightning_presets.core.rules import Problem, Rule, rule


@rule(
    "LP095", "error", "construction", "a launcher environment that refuses the devices and nodes",
    fails='Trainer(strategy="ddp_static_graph", accelerator="cpu", devices=8, num_nodes=2)   # under SLURM with '
    "--ntasks-per-node=4",
    fixed='Trainer(strategy="ddp_static_graph", accelerator="cpu", devices=4, num_nodes=2)   # under SLURM with '
    "--ntasks-per-node=4",
    evidence="runtime: tests/evidence/test_fails_job.py::test_lp095_the_refusal_is_the_environments_own "
    "(SLURMEnvironment/TorchElasticEnvironment.validate_settings raise ValueError when `fit` launches)",
    setting=Setting(gpus=4, nodes=2, cluster="slurm"),  # SLURM's variables for 4 tasks on each of 2 nodes
)  # fmt: skip
def environment_takes_the_job(ctx: Context) -> Problem | None:
    """The environment's own ``validate_settings`` ran when the snapshot was taken (``Context.environment_refusal``)."""
    if ctx.environment_refusal is None:
        return None
    return Problem(
        f"{ctx.call('devices', 'num_nodes')}: the {ctx.cluster_environment} Lightning selected refuses the job: "
        f"{ctx.environment_refusal}; Lightning checks it only when `fit` launches, on every rank",
        "make devices and num_nodes match what the launcher starts (its tasks per node and nodes), or launch with "
        "the matching counts",
    )


LAUNCH_RULES: tuple[Rule, ...] = (environment_takes_the_job,)
"""Run for every strategy preset, built-in or not (the guard head adds them)."""
