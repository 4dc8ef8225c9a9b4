"""``check --cluster`` for every launcher Lightning runs under, and the launch arithmetic (LP717-LP719, LP725-LP729).

What Lightning selects is Lightning's own answer: each ``check`` here builds the Trainer in the simulated variables and
reads the cluster environment its connector chose. The launch functions of ``guards.launch_rules`` are pure, so their
boundaries (the last legal rank, the first illegal one) are tested directly, fast.
"""

from __future__ import annotations

import importlib.util
import json
import shlex
from typing import Any

import pytest

from lightning_presets.cli import main
from lightning_presets.guards import launch_rules as launch
from lightning_presets.tools.check import cluster
from lightning_presets.tools.simulation import CLUSTERS, cluster_variables

LAUNCH_CODES = {"LP717", "LP718", "LP719", "LP725", "LP726", "LP727", "LP728", "LP729"}
GPU = "--accelerator cuda --gpus 8"


def check(capsys: pytest.CaptureFixture[str], args: str) -> tuple[int, dict[str, Any]]:
    strategy = "" if "--strategy" in args else "--strategy ddp"
    try:
        code = main(["check", *shlex.split(f"{GPU} {strategy} {args} --json")])
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    return code, json.loads(capsys.readouterr().out)


def codes(report: dict[str, Any]) -> set[str]:
    return {finding["code"] for finding in report["findings"]}


MPI_ENVIRONMENT = "MPIEnvironment" if importlib.util.find_spec("mpi4py") else "LightningEnvironment"


@pytest.mark.parametrize(
    ("kind", "environment", "expected"),
    [
        # without mpi4py MPIEnvironment.detect() is False: Lightning's own environment, and LP729 says what follows
        ("mpi", "LightningEnvironment", {"LP729"}),
        ("kubeflow", "LightningEnvironment", {"LP729"}),  # KubeflowEnvironment is never detected
        ("skypilot", "TorchElasticEnvironment", set()),  # torchrun on every node
        ("ray", "LightningEnvironment", set()),  # Ray sets LOCAL_RANK/NODE_RANK/RANK itself, no torchrun
    ],
)
def test_each_launcher_gets_the_environment_lightning_selects_there(
    capsys: pytest.CaptureFixture[str], kind: str, environment: str, expected: set[str]
) -> None:
    if kind == "mpi" and MPI_ENVIRONMENT != "LightningEnvironment":
        pytest.skip("mpi4py is installed: outside mpiexec its world has one rank, so Lightning still selects its own")
    code, report = check(capsys, f"--devices 8 --num-nodes 2 --cluster {kind}")
    assert report["resolved"]["cluster_environment"] == environment
    assert report["resolved"]["world_size"] == 16
    assert codes(report) & LAUNCH_CODES == expected
    assert "LP713" not in codes(report)  # the launcher's own rule speaks, not the generic one
    assert code == 0  # warnings only


SELECTED = {"slurm": "SLURMEnvironment", "lsf": "LSFEnvironment", "torchelastic": "TorchElasticEnvironment",
            "skypilot": "TorchElasticEnvironment", "trainjob": "TorchElasticEnvironment"}  # fmt: skip


def test_every_simulated_launcher_is_consistent_with_its_own_arithmetic() -> None:
    """The simulated rank 0 of 2 nodes × 8: no launch rule fires on any launcher's own variables (only LP729, which
    is about Lightning not detecting the launcher at all)."""
    for kind in CLUSTERS:
        for nodes in (1, 2):
            env = cluster_variables(kind, 8, nodes, rankfile="/nonexistent")
            environment = SELECTED.get(kind, "LightningEnvironment")
            target = cluster.Target(kind="trainer", strategy="ddp", accelerator="cuda", devices=8, num_nodes=nodes,
                                    env=env, gpus_visible=8, gpus_per_node=8, environment=environment)  # fmt: skip
            fired = {finding.code for finding in cluster.cluster_findings(target)}
            assert fired & LAUNCH_CODES <= {"LP729"}, (kind, nodes, fired)


def test_torchrun_inside_srun_lightning_follows_torchrun(capsys: pytest.CaptureFixture[str]) -> None:
    """Nested launchers: TorchElasticEnvironment is detected before SLURMEnvironment, so SLURM's counts are ignored
    (LP705-LP707 stay silent) and LP727 says that srun's 8 tasks per node each ran torchrun."""
    slurm = "--env SLURM_JOB_ID=4242 --env SLURM_NNODES=2 --env SLURM_NTASKS=16 --env SLURM_NTASKS_PER_NODE=8"
    _, report = check(capsys, f"--devices 8 --num-nodes 2 --cluster torchelastic {slurm}")
    assert report["resolved"]["cluster_environment"] == "TorchElasticEnvironment"
    assert codes(report) & {"LP705", "LP706", "LP707", "LP727"} == {"LP727"}
    one_per_node = "--env SLURM_JOB_ID=4242 --env SLURM_NNODES=2 --env SLURM_NTASKS=2 --env SLURM_NTASKS_PER_NODE=1"
    _, report = check(capsys, f"--devices 8 --num-nodes 2 --cluster torchelastic {one_per_node}")
    assert report["resolved"]["cluster_environment"] == "TorchElasticEnvironment"
    assert not codes(report) & LAUNCH_CODES  # srun --ntasks-per-node=1 running torchrun: the documented way


def test_one_slurm_task_with_several_devices_is_slurms_world_not_lightnings_launch(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """sbatch with one task and devices=4: SLURM_NTASKS is set, so Lightning selects SLURMEnvironment, which creates
    processes externally: Lightning launches nothing itself and the world is SLURM's 1 (LP707, with its evidence)."""
    _, report = check(capsys, "--devices 4 --env SLURM_JOB_ID=4242 --env SLURM_NTASKS=1 --env SLURM_NNODES=1 "
                              "--env SLURM_PROCID=0 --env SLURM_LOCALID=0 --env SLURM_NODEID=0")  # fmt: skip
    assert report["resolved"]["cluster_environment"] == "SLURMEnvironment"
    assert "LP707" in codes(report)
    assert "LP728" not in codes(report)  # srun (or the batch step's one task) did start it: SLURM's world


def test_a_batch_job_without_its_launcher(capsys: pytest.CaptureFixture[str]) -> None:
    code, report = check(capsys, "--devices 8 --num-nodes 2 --env SLURM_JOB_ID=4242 --env SLURM_NNODES=2")
    assert report["resolved"]["cluster_environment"] == "LightningEnvironment"
    assert "LP728" in codes(report)
    assert "LP713" not in codes(report)
    assert code == 1
    _, report = check(capsys, "--devices 8 --num-nodes 2 --env PBS_JOBID=77.pbs")
    assert "LP728" in codes(report)
    lp728 = next(f for f in report["findings"] if f["code"] == "LP728")
    assert "PBS_JOBID=77.pbs" in lp728["message"]
    assert "mpiexec" in lp728["hint"]


# --- the launch functions: each error's refused case and its accepted neighbours ------------------------------------


def _launch(environment: str = "LightningEnvironment", devices: int | None = 8, nodes: int = 2, **env: str) -> Any:
    return launch.Launch(env, environment, devices, nodes)


def _with(env: dict[str, str], environment: str = "LightningEnvironment", devices: int = 8, nodes: int = 2) -> Any:
    return launch.Launch(env, environment, devices, nodes)


@pytest.mark.parametrize(
    ("env", "nodes", "refused"),
    [
        ({"NODE_RANK": "2"}, 2, True),  # nodes numbered from 1
        ({"NODE_RANK": "-1"}, 2, True),
        ({"GROUP_RANK": "4"}, 4, True),  # GROUP_RANK is read when NODE_RANK is not set
        ({"NODE_RANK": "1"}, 2, False),  # the last node
        ({"NODE_RANK": "0"}, 2, False),
        ({"NODE_RANK": "0", "GROUP_RANK": "5"}, 2, False),  # NODE_RANK first, as Lightning reads them
        ({"NODE_RANK": "3"}, 4, False),
        ({}, 2, False),  # no node rank: node 0
    ],
)
def test_node_rank_outside(env: dict[str, str], nodes: int, refused: bool) -> None:
    assert (launch.node_rank_outside(_with(env, nodes=nodes)) is not None) is refused


def test_node_rank_is_read_only_in_lightnings_own_environment() -> None:
    """torchrun's GROUP_RANK does not make the global rank (RANK does): no LP717 under TorchElasticEnvironment."""
    assert launch.node_rank_outside(_launch("TorchElasticEnvironment", GROUP_RANK="5")) is None
    problem = launch.node_rank_outside(_launch(NODE_RANK="2"))
    assert problem is not None
    assert "NODE_RANK=2" in problem.message
    assert "global ranks from 16" in problem.message


@pytest.mark.parametrize(
    ("environment", "env", "devices", "nodes", "refused"),
    [
        ("TorchElasticEnvironment", {"RANK": "16", "WORLD_SIZE": "16"}, 8, 2, True),
        ("TorchElasticEnvironment", {"RANK": "-1", "WORLD_SIZE": "16"}, 8, 2, True),
        ("KubeflowEnvironment", {"RANK": "2", "WORLD_SIZE": "2"}, 1, 2, True),
        ("LightningEnvironment", {"NODE_RANK": "1", "LOCAL_RANK": "2"}, 2, 2, True),  # 1 × 2 + 2 = 4 in 4
        ("TorchElasticEnvironment", {"RANK": "15", "WORLD_SIZE": "16"}, 8, 2, False),  # the last rank
        ("TorchElasticEnvironment", {"RANK": "0", "WORLD_SIZE": "16"}, 8, 2, False),
        ("KubeflowEnvironment", {"RANK": "1", "WORLD_SIZE": "2"}, 1, 2, False),
        ("LightningEnvironment", {"NODE_RANK": "1", "LOCAL_RANK": "1"}, 2, 2, False),  # 3 in 4
        ("LightningEnvironment", {"NODE_RANK": "0", "LOCAL_RANK": "3"}, 2, 2, False),  # 3 in 4: LP726's, not LP718's
        ("LightningEnvironment", {"NODE_RANK": "2", "LOCAL_RANK": "0"}, 2, 2, False),  # LP717's
        ("SLURMEnvironment", {"RANK": "16", "WORLD_SIZE": "16"}, 8, 2, False),  # SLURM reads SLURM_PROCID
    ],
)
def test_rank_outside(environment: str, env: dict[str, str], devices: int, nodes: int, refused: bool) -> None:
    assert (launch.rank_outside(_with(env, environment, devices, nodes)) is not None) is refused


@pytest.mark.parametrize(
    ("env", "environment", "nodes", "refused"),
    [
        ({}, "LightningEnvironment", 2, False),  # no job id: LP713's generic warning
        ({"SLURM_JOB_ID": "1"}, "LightningEnvironment", 2, True),
        ({"PBS_JOBID": "1"}, "LightningEnvironment", 2, True),
        ({"SLURM_JOB_ID": "1"}, "LightningEnvironment", 1, False),  # one node: Lightning launches the devices
        ({"SLURM_JOB_ID": "1", "NODE_RANK": "0"}, "LightningEnvironment", 2, False),  # started on every node
        ({"SLURM_JOB_ID": "1", "LOCAL_RANK": "0"}, "LightningEnvironment", 2, False),  # a launcher started it
        ({"SLURM_JOB_ID": "1", "SLURM_JOB_NAME": "interactive"}, "LightningEnvironment", 2, False),  # LP712's
        ({"SLURM_JOB_ID": "1"}, "SLURMEnvironment", 2, False),  # srun
        ({"SLURM_JOB_ID": "1"}, "TorchElasticEnvironment", 2, False),  # torchrun inside the job
    ],
)
def test_batch_job_without_launcher(env: dict[str, str], environment: str, nodes: int, refused: bool) -> None:
    assert (launch.batch_job_without_launcher(_with(env, environment, nodes=nodes)) is not None) is refused


@pytest.mark.parametrize(
    ("address", "nodes", "environment", "fires"),
    [
        ("127.0.0.1", 2, "TorchElasticEnvironment", True),
        ("localhost", 2, "LightningEnvironment", True),
        ("127.0.1.1", 4, "SLURMEnvironment", True),  # Debian's host-name line
        ("127.0.0.1", 1, "TorchElasticEnvironment", False),  # one node meets on the loopback
        ("10.0.0.1", 2, "TorchElasticEnvironment", False),
        ("node0", 2, "LightningEnvironment", False),
        ("127.0.0.1", 2, "LSFEnvironment", False),  # LSF takes the address from its rank file
    ],
)
def test_loopback_main_address(address: str, nodes: int, environment: str, fires: bool) -> None:
    found = launch.loopback_main_address(_launch(environment, nodes=nodes, MASTER_ADDR=address))
    assert (found is not None) is fires


def test_ray_workers_ranks_against_lightnings_arithmetic() -> None:
    """2 Ray workers per node with devices=1: Lightning computes NODE_RANK × 1 + LOCAL_RANK, Ray says RANK=2."""
    wrong = _launch(devices=1, NODE_RANK="1", LOCAL_RANK="0", RANK="2", WORLD_SIZE="4")
    assert launch.lightning_rank(wrong) == 1
    right = _launch(devices=2, NODE_RANK="1", LOCAL_RANK="0", RANK="2", WORLD_SIZE="4")
    assert launch.lightning_rank(right) == 2
    assert launch.launcher_world(right) == ("WORLD_SIZE", 4)
    assert launch.launcher_world(_launch(WORLD_SIZE="4")) is None  # Lightning launches: WORLD_SIZE is not the world
    assert launch.lightning_rank(_launch("TorchElasticEnvironment", LOCAL_RANK="0")) is None


# --- construction: the same functions on the variables the process was started with (LP096) -----------------------


def test_construction_refuses_a_node_rank_outside_the_job(monkeypatch: pytest.MonkeyPatch) -> None:
    from lightning.pytorch import Trainer

    from lightning_presets import PresetConfigError

    for name in ("SLURM_NTASKS", "TORCHELASTIC_RUN_ID", "WORLD_SIZE", "RANK", "GROUP_RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("MASTER_ADDR", "10.0.0.1")
    monkeypatch.setenv("NODE_RANK", "2")
    with pytest.raises(PresetConfigError) as refused:
        Trainer(strategy="ddp_static_graph", accelerator="cpu", devices=1, num_nodes=2)
    assert "LP096" in refused.value.codes
    assert "NODE_RANK=2" in str(refused.value)
    monkeypatch.setenv("NODE_RANK", "1")  # the accepted neighbour: the last node
    Trainer(strategy="ddp_static_graph", accelerator="cpu", devices=1, num_nodes=2, logger=False)


def test_check_says_it_once_with_the_launchers_words(capsys: pytest.CaptureFixture[str]) -> None:
    """Construction's LP096 and check's LP717 are the same finding: check keeps LP717."""
    _, report = check(capsys, "--devices 8 --num-nodes 2 --strategy ddp_static_graph --env MASTER_ADDR=10.0.0.1 "
                              "--env NODE_RANK=2")  # fmt: skip
    assert "LP717" in codes(report)
    assert "LP096" not in codes(report)


SBATCH_NTASKS = "--env SLURM_JOB_ID=4242 --env SLURM_NTASKS=8 --env SLURM_NNODES=2"


def test_a_slurm_job_without_tasks_per_node_is_said_once_with_the_per_node_fix(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Lightning refuses ``--ntasks`` without ``--ntasks-per-node`` while the Trainer is built (LP700, with its hint
    ``--ntasks-per-node=8``); check reports LP734 instead, with the tasks per node the Trainer needs."""
    code, report = check(capsys, f"--devices 4 --num-nodes 2 {SBATCH_NTASKS}")
    assert code == 1
    assert codes(report) == {"LP734"}
    (finding,) = report["findings"]
    assert "SLURM_NTASKS=8 and no SLURM_NTASKS_PER_NODE" in finding["message"]
    assert finding["hint"].startswith("#SBATCH --nodes=2 --ntasks-per-node=4 in place of --ntasks=8")


def test_lightning_refusing_something_else_first_keeps_its_own_finding(capsys: pytest.CaptureFixture[str]) -> None:
    """devices=0 is refused before Lightning makes the cluster environment: that is LP700's, and LP734 says the rest."""
    code, report = check(capsys, f"--devices 0 --num-nodes 2 {SBATCH_NTASKS}")
    assert code == 1
    assert {"LP700", "LP734"} <= codes(report)
    (lightning,) = [each for each in report["findings"] if each["code"] == "LP700"]
    assert "ntasks" not in lightning["message"]


def test_the_environment_whose_constructor_refuses_is_named() -> None:
    """Lightning's detection picks SLURM's environment, whose constructor raises: the check names it, with the text."""
    from lightning_presets.tools.simulation import only_these_variables
    from lightning_presets.tools.simulation.lightning import selected_environment

    with only_these_variables({"SLURM_NTASKS": "8", "SLURM_JOB_NAME": "train"}):
        refused = selected_environment("trainer")
    assert refused.environment == "SLURMEnvironment"
    assert refused.refusal is not None
    assert "--ntasks=8" in refused.refusal
    with only_these_variables({"SLURM_NTASKS": "8", "SLURM_NTASKS_PER_NODE": "4", "SLURM_JOB_NAME": "train"}):
        assert selected_environment("fabric") == ("SLURMEnvironment", None)


# --- LP712: an interactive SLURM allocation, with and without Lightning's manual multi-node launch ---------------

_INTERACTIVE = "--devices 8 --num-nodes 2 --cluster slurm --env SLURM_JOB_NAME=interactive"
_MANUAL = {"MASTER_ADDR": "node001", "MASTER_PORT": "29500", "NODE_RANK": "1"}


def test_lp712_accepts_the_manual_multi_node_launch_in_an_interactive_allocation(
    capsys: pytest.CaptureFixture[str],
) -> None:
    manual = " ".join(f"--env {name}={value}" for name, value in _MANUAL.items())
    code, report = check(capsys, f"{_INTERACTIVE} {manual}")
    assert (code, codes(report) & {"LP712", "LP713"}) == (0, set()), report


@pytest.mark.parametrize("missing", sorted(_MANUAL))
def test_lp712_refuses_an_interactive_allocation_missing_one_of_the_manual_launchs_variables(
    capsys: pytest.CaptureFixture[str], missing: str
) -> None:
    partial = " ".join(f"--env {name}={value}" for name, value in _MANUAL.items() if name != missing)
    code, report = check(capsys, f"{_INTERACTIVE} {partial}")
    assert code == 1
    (finding,) = [each for each in report["findings"] if each["code"] == "LP712"]
    assert f"without {missing}" in finding["message"]


@pytest.mark.distributed
def test_a_manual_launch_in_an_interactive_allocation_trains_as_two_nodes() -> None:
    """LP712's neighbour run for real: two processes, each a node of one CPU device, inside an interactive allocation
    (SLURM_JOB_NAME=interactive, SLURM's variables of the shell), each with MASTER_ADDR, MASTER_PORT and its own
    NODE_RANK: Lightning takes its LightningEnvironment, the nodes meet, and both ranks train to the same weights."""
    from pathlib import Path

    from harness import free_port, run_job

    slurm = {"SLURM_JOB_NAME": "interactive", "SLURM_JOB_ID": "4242", "SLURM_NTASKS": "1", "SLURM_NNODES": "1",
             "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_NODELIST": "127.0.0.1"}  # fmt: skip
    env = {**slurm, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    job = run_job("guard_truth:interactive_slurm_nodes", path=(str(Path(__file__).parent / "evidence" / "scripts"),),
                  env=env, rank_env={0: {"NODE_RANK": "0"}, 1: {"NODE_RANK": "1"}}, unset=("LIGHTNING_PRESETS_SKIP",),
                  timeout=180)  # fmt: skip
    assert job.outcome == "trained", job.describe()
    lines = [line for line in job.stdout.splitlines() if "RESULT {" in line]
    results = sorted((json.loads(line.split("RESULT ", 1)[1]) for line in lines), key=lambda each: each["rank"])
    assert [(each["rank"], each["node"], each["world"]) for each in results] == [(0, 0, 2), (1, 1, 2)]
    assert {each["environment"] for each in results} == {"LightningEnvironment"}
    assert results[0]["weights"] == results[1]["weights"]
    assert len(results[0]["losses"]) == 3


# --- Kubeflow: PyTorchJob (training operator v1) and TrainJob (Trainer v2) -------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        "--devices 4 --num-nodes 2 --cluster trainjob",  # torchrun reads PET_NNODES=2, PET_NPROC_PER_NODE=4
        "--devices 4 --num-nodes 2 --cluster trainjob --env PET_NPROC_PER_NODE=4 --env PET_NNODES=2",
        "--devices 4 --num-nodes 2 --cluster kubeflow --env PET_NPROC_PER_NODE=4",  # nprocPerNode: torchrun per pod
        "--devices 1 --num-nodes 1 --cluster trainjob",
    ],
)
def test_consistent_kubeflow_jobs_pass(capsys: pytest.CaptureFixture[str], args: str) -> None:
    """Accepted neighbours: a TrainJob, and a PyTorchJob with nprocPerNode, whose counts match devices and num_nodes."""
    code, report = check(capsys, args)
    assert report["resolved"]["cluster_environment"] == "TorchElasticEnvironment"
    assert report["findings"] == [], report["findings"]
    assert code == 0


@pytest.mark.parametrize(
    ("args", "named"),
    [
        ("--devices 2 --num-nodes 2 --cluster trainjob --env PET_NPROC_PER_NODE=4", "PET_NPROC_PER_NODE=4 ≠ devices=2"),
        ("--devices 4 --num-nodes 3 --cluster trainjob --env PET_NNODES=2", "PET_NNODES=2 ≠ num_nodes=3"),
        ("--devices 2 --num-nodes 2 --cluster kubeflow --env PET_NPROC_PER_NODE=4", "PET_NPROC_PER_NODE=4 ≠ devices=2"),
    ],
)
def test_a_kubeflow_count_that_disagrees_is_named(capsys: pytest.CaptureFixture[str], args: str, named: str) -> None:
    """torchrun's WORLD_SIZE comes from the operator's PET_NNODES × PET_NPROC_PER_NODE: the finding names the one that
    differs from the Trainer, and the fix is said in the job spec's words."""
    code, report = check(capsys, args)
    findings = {finding["code"]: finding for finding in report["findings"]}
    assert "LP708" in findings, report["findings"]
    assert code == 1
    assert named in findings["LP708"]["message"]
    assert "numProcPerNode" in findings["LP708"]["hint"]
    assert "nprocPerNode" in findings["LP708"]["hint"]
    if "PET_NPROC_PER_NODE" in named:
        assert "PET_NPROC_PER_NODE=4" in findings["LP709"]["message"]


def test_the_operators_variables_follow_the_given_counts() -> None:
    from lightning_presets.tools.simulation import kubeflow_variables

    pod = kubeflow_variables("kubeflow", 8, 3)  # a plain PyTorchJob: one process per pod
    assert (pod["WORLD_SIZE"], pod["RANK"], pod["PET_NNODES"], pod["PET_NPROC_PER_NODE"]) == ("3", "0", "3", "1")
    assert "TORCHELASTIC_RUN_ID" not in pod
    pod = kubeflow_variables("kubeflow", 8, 3, {"PET_NPROC_PER_NODE": "4", "PET_NODE_RANK": "2"})
    assert (pod["WORLD_SIZE"], pod["LOCAL_WORLD_SIZE"], pod["RANK"], pod["GROUP_RANK"]) == ("12", "4", "8", "2")
    node = kubeflow_variables("trainjob", 4, 2, {"PET_NNODES": "1:3"})  # an elastic range: its upper end
    assert (node["WORLD_SIZE"], node["MASTER_ADDR"]) == ("12", node["PET_MASTER_ADDR"])
    assert "PET_MASTER_ADDR" not in pod  # the v1 operator sets MASTER_ADDR; Trainer v2 sets PET_MASTER_ADDR


KUBEFLOW_YAML = """\
trainer:
  accelerator: cpu
  devices: 1
  num_nodes: 2
  strategy: ddp
  plugins:
    - class_path: lightning.pytorch.plugins.environments.KubeflowEnvironment
"""


def test_kubeflow_environment_from_a_lightningcli_config(capsys: pytest.CaptureFixture[str], tmp_path: Any) -> None:
    """A plain PyTorchJob (one process per pod) with KubeflowEnvironment in trainer.plugins: Lightning takes the
    world from WORLD_SIZE and RANK, so nothing is wrong (LP729 was reported when the check ignored trainer.plugins);
    without the plugin, LP729; with a WORLD_SIZE other than the pods, LP725 names the operator's counts."""
    config = tmp_path / "kubeflow.yaml"
    config.write_text(KUBEFLOW_YAML)
    code, report = check(capsys, f"--config {config} --cluster kubeflow")
    assert report["resolved"]["cluster_environment"] == "KubeflowEnvironment"
    assert report["findings"] == [], report["findings"]
    assert code == 0
    config.write_text(KUBEFLOW_YAML.rpartition("  plugins:")[0])
    code, report = check(capsys, f"--config {config} --cluster kubeflow")
    assert codes(report) == {"LP729"}
    config.write_text(KUBEFLOW_YAML)
    _, report = check(capsys, f"--config {config} --cluster kubeflow --env PET_NPROC_PER_NODE=1 --env PET_NNODES=4")
    (finding,) = report["findings"]
    assert finding["code"] == "LP725"
    assert "PET_NNODES=4 × PET_NPROC_PER_NODE=1" in finding["message"]


# --- the guards read the world the launcher made (not devices × num_nodes) -------------------------------------------


@pytest.mark.parametrize(
    ("strategy", "one_device"), [("ddp_static_graph", "LP305"), ("fsdp2", "LP212"), ("fsdp_offload_ckpt", "LP106")]
)
def test_guards_read_the_launchers_world(
    capsys: pytest.CaptureFixture[str], tmp_path: Any, strategy: str, one_device: str
) -> None:
    """KubeflowEnvironment (as Ray's environment) takes the world from the launcher: one device per pod and no
    num_nodes in a PyTorchJob of 2 replicas is a world of 2, and no guard says "one process in total" (they did,
    from devices=1 × 1 node). FSDP2's device mesh (data_parallel_size='auto': the whole world) covers those 2
    processes, so no LP211 (the same job trains for real: tests/test_scaling_out.py). With one pod the one-process
    warning stands (the neighbour)."""
    config = tmp_path / "kubeflow.yaml"
    config.write_text(KUBEFLOW_YAML.replace("  num_nodes: 2\n", ""))
    args = f"--config {config} --strategy {strategy} --devices 1 --cluster kubeflow --env PET_NNODES="
    _, report = check(capsys, args + "2")
    found = codes(report)
    assert report["resolved"]["cluster_environment"] == "KubeflowEnvironment"
    assert one_device not in found, report["findings"]
    assert "LP211" not in found, report["findings"]
    assert one_device in codes(check(capsys, args + "1")[1])
