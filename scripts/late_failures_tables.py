"""The inventory's two tables: the settings both the Trainer (or DeepSpeedStrategy) and a DeepSpeed config can set,
and the launch variables Lightning's cluster environments and torch's env:// rendezvous read.

Each row is reviewed data with a status as the sites have (``construction``, ``preempted`` with codes,
``unknowable`` with why, ``open`` with the guard; a variable that cannot be wrong is ``not-a-failure``). The drift
test checks the rows against the installed sources: every Trainer/Fabric/DeepSpeedStrategy argument named is a
parameter there, every DeepSpeed key is a key DeepSpeed's sources name, every code is documented, and the variables
are exactly those the environments' and the rendezvous' sources read (a new one, or one no longer read, fails).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Row:
    subject: str
    """The setting (``Trainer(gradient_clip_val=)`` / ``gradient_clipping``) or the variable's name."""
    wins: str
    """Which side takes effect (settings), or what goes wrong (variables)."""
    status: str
    detail: str
    """The codes (preempted), why (unknowable), the guard (open) or why it is no failure."""
    codes: tuple[str, ...] = ()
    later: tuple[str, ...] = ()
    arguments: tuple[str, ...] = ()
    """``Trainer.name``, ``Fabric.name`` or ``DeepSpeedStrategy.name``: the Lightning side (settings)."""
    keys: tuple[str, ...] = ()
    """The DeepSpeed config keys (settings); the readers' files (variables)."""
    releases: tuple[str, ...] = ()
    """The Lightning releases that read the variable, where not every supported one does."""


SETTINGS: tuple[Row, ...] = (
    Row("precision: `precision=` / `fp16`, `bf16` sections, both enabled",
        "neither: Lightning adds the section `precision=` asks for unless the config has it; DeepSpeed then asserts "
        "fp16 and bf16 are not both enabled", "preempted", "", ("LP405",),
        arguments=("Trainer.precision", "Fabric.precision"), keys=("fp16", "bf16")),
    Row("precision: `precision=` / an `fp16` or `bf16` section that disagrees (`precision='16-mixed'` with "
        "`fp16.enabled: false`, or `bf16.enabled: true` with `precision='32-true'`)",
        "the config: Lightning leaves a present section alone, so DeepSpeed trains in the config's dtype while "
        "Lightning's precision plugin casts inputs for the other", "open",
        "a config whose fp16/bf16 `enabled` flags differ from the dtype `precision=` selects",
        arguments=("Trainer.precision", "Fabric.precision"), keys=("fp16", "bf16")),
    Row("loss scaling: `DeepSpeedStrategy(loss_scale=, initial_scale_power=, loss_scale_window=, hysteresis=, "
        "min_loss_scale=)` / `fp16.loss_scale`, ...",
        "the config: the arguments fill the `fp16` section only when Lightning adds it (no `fp16` in the config)",
        "open", "DeepSpeedStrategy loss-scaling arguments other than their defaults together with a config that has "
        "an `fp16` section", arguments=("DeepSpeedStrategy.loss_scale", "DeepSpeedStrategy.initial_scale_power",
        "DeepSpeedStrategy.loss_scale_window", "DeepSpeedStrategy.hysteresis", "DeepSpeedStrategy.min_loss_scale"),
        keys=("loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis", "min_loss_scale")),
    Row("clipping: `Trainer(gradient_clip_val=)` / `gradient_clipping`",
        "the config: Lightning writes gradient_clip_val into `gradient_clipping` only when the key is absent; a "
        "config value silently replaces the Trainer's", "preempted", "", ("LP421",),
        arguments=("Trainer.gradient_clip_val",), keys=("gradient_clipping",)),
    Row("clipping by value: `Trainer(gradient_clip_algorithm='value')` / `gradient_clipping`",
        "DeepSpeed: it clips by norm only; Lightning raises when `fit` starts", "preempted", "", ("LP415",),
        arguments=("Trainer.gradient_clip_algorithm",), keys=("gradient_clipping",)),
    Row("accumulation: `Trainer(accumulate_grad_batches=)` / `gradient_accumulation_steps`",
        "the Trainer: Lightning raises when the config has the key, then writes accumulate_grad_batches into it",
        "preempted", "", ("LP409",), arguments=("Trainer.accumulate_grad_batches",),
        keys=("gradient_accumulation_steps",)),
    Row("batch arithmetic: `train_batch_size` / micro-batch × accumulation × world size",
        "DeepSpeed asserts the product", "preempted", "", ("LP406",), ("LP407",),
        arguments=("Trainer.accumulate_grad_batches", "Trainer.devices", "Trainer.num_nodes"),
        keys=("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")),
    Row("micro-batch: the train DataLoader's `batch_size` / `train_micro_batch_size_per_gpu`",
        "the DataLoader feeds the batches; the config's value only enters DeepSpeed's batch arithmetic, throughput "
        "and logging (Lightning writes the loader's batch size when the key is absent)", "unknowable",
        "the DataLoader is built at `fit` (`\"auto\"` values are caught: LP408)", later=(),
        arguments=("DeepSpeedStrategy.logging_batch_size_per_gpu",), keys=("train_micro_batch_size_per_gpu",)),
    Row("untested optimizers: `DeepSpeedStrategy(zero_allow_untested_optimizer=)` / `zero_allow_untested_optimizer`",
        "the config: the argument (default True) only enters the config Lightning builds when none is given; a user "
        "config without the key gets DeepSpeed's False, and the engine refuses a torch optimizer with ZeRO",
        "open", "a user config that enables ZeRO without `zero_allow_untested_optimizer` (whether the optimizer is one "
        "DeepSpeed tested is known once `configure_optimizers` runs: LP417 then)", later=("LP417",),
        arguments=("DeepSpeedStrategy.zero_allow_untested_optimizer",), keys=("zero_allow_untested_optimizer",)),
    Row("ZeRO stage and offload: `DeepSpeedStrategy(stage=, offload_optimizer=, offload_parameters=, ...)` / "
        "`zero_optimization`",
        "the config: the arguments only build the config Lightning makes when none is given", "open",
        "DeepSpeedStrategy ZeRO/offload arguments other than their defaults together with `config=` (parameter "
        "offload below stage 3 and unknown stages are caught: LP404, LP410)",
        arguments=("DeepSpeedStrategy.stage", "DeepSpeedStrategy.offload_optimizer",
                   "DeepSpeedStrategy.offload_parameters"), keys=("zero_optimization", "offload_optimizer",
                                                                   "offload_param")),
    Row("activation checkpointing: `DeepSpeedStrategy(partition_activations=, cpu_checkpointing=, "
        "contiguous_memory_optimization=)` / `activation_checkpointing`",
        "the config (the arguments only build the config Lightning makes when none is given)", "open",
        "DeepSpeedStrategy activation-checkpointing arguments other than their defaults together with `config=` "
        "(contiguous_memory_optimization, which Lightning cannot configure either way, is caught: LP413)",
        arguments=("DeepSpeedStrategy.partition_activations", "DeepSpeedStrategy.cpu_checkpointing",
                   "DeepSpeedStrategy.contiguous_memory_optimization"), keys=("activation_checkpointing",)),
    Row("optimizer and scheduler: `LightningModule.configure_optimizers` / `optimizer`, `scheduler` sections",
        "the config: Lightning passes no optimizer to DeepSpeed when the config has an `optimizer` section, so "
        "configure_optimizers' optimizer is not used (an info log says so)", "open",
        "a config with an `optimizer` section under a Trainer (the LightningModule's optimizer is dropped)",
        keys=("optimizer", "scheduler")),
)  # fmt: skip

_LIGHTNING = "lightning/fabric/plugins/environments/"
VARIABLES: tuple[Row, ...] = (
    Row("MASTER_ADDR", "a loopback address across nodes: every node meets itself and `fit` hangs in the rendezvous; "
        "absent: LightningEnvironment uses 127.0.0.1, SLURM the first host of SLURM_NODELIST", "open",
        "a loopback MASTER_ADDR with num_nodes > 1 under an environment that reads it", later=("LP719",),
        keys=(f"{_LIGHTNING}kubeflow.py", f"{_LIGHTNING}lightning.py", f"{_LIGHTNING}lsf.py",
              f"{_LIGHTNING}slurm.py", f"{_LIGHTNING}torchelastic.py", "torch/distributed/rendezvous.py")),
    Row("MASTER_PORT", "not an integer: int() raises ValueError in the environment's main_port or in env:// at setup; "
        "outside 0..65535: env:// raises ValueError; in use on the main node: the store fails to bind at setup", "open",
        "a MASTER_PORT that is not an integer from 1 to 65535 (whether the port is free on the main node is "
        "unknowable: a fact of that host when `fit` starts)",
        keys=(f"{_LIGHTNING}kubeflow.py", f"{_LIGHTNING}lightning.py", f"{_LIGHTNING}lsf.py",
              f"{_LIGHTNING}slurm.py", f"{_LIGHTNING}torchelastic.py", "torch/distributed/rendezvous.py")),
    Row("NODE_RANK", "at or past num_nodes: the node's ranks are outside the world and the rendezvous waits or "
        "gloo raises `rank < size`", "preempted", "", ("LP096",), ("LP717",), keys=(f"{_LIGHTNING}lightning.py",)),
    Row("GROUP_RANK", "the node rank torchelastic sets (Lightning's fallback for NODE_RANK): the same as NODE_RANK",
        "preempted", "", ("LP096",), ("LP717",), keys=(f"{_LIGHTNING}lightning.py", f"{_LIGHTNING}torchelastic.py")),
    Row("WORLD_SIZE", "other than devices × num_nodes: TorchElasticEnvironment.validate_settings raises at `fit` "
        "(LP095 reports it at construction); KubeflowEnvironment checks nothing and the ranks wait", "open",
        "Kubeflow's WORLD_SIZE other than devices × num_nodes", later=("LP725",),
        keys=(f"{_LIGHTNING}kubeflow.py", f"{_LIGHTNING}lightning.py", f"{_LIGHTNING}torchelastic.py",
              "torch/distributed/rendezvous.py")),
    Row("RANK", "at or past WORLD_SIZE: outside the world; read by torchelastic/Kubeflow (Lightning's own "
        "environment computes the rank and ignores it)", "preempted", "", ("LP096",), ("LP718", "LP726"),
        keys=(f"{_LIGHTNING}kubeflow.py", f"{_LIGHTNING}torchelastic.py", "torch/distributed/rendezvous.py")),
    Row("LOCAL_RANK", "at or past the devices per node: a global rank outside the world", "preempted", "", ("LP096",),
        ("LP718",), keys=(f"{_LIGHTNING}lightning.py", f"{_LIGHTNING}torchelastic.py")),
    Row("STANDALONE_PORT", "Lightning's own record of the free port it chose for a single-node job", "not-a-failure",
        "Lightning sets it itself", keys=(f"{_LIGHTNING}lightning.py",), releases=("2.6.6",)),
    Row("SLURM_NTASKS", "the world size: SLURMEnvironment.validate_settings compares only the tasks per node and the "
        "nodes, so a job started with --ntasks alone and another count waits for ranks that never come", "open",
        "SLURM_NTASKS other than devices × num_nodes (without SLURM_NTASKS_PER_NODE, which LP095 covers)",
        later=("LP707",), keys=(f"{_LIGHTNING}slurm.py",)),
    Row("SLURM_NTASKS_PER_NODE", "other than devices: validate_settings raises at `fit`", "preempted", "", ("LP095",),
        ("LP705",), keys=(f"{_LIGHTNING}slurm.py",)),
    Row("SLURM_NNODES", "other than num_nodes: validate_settings raises at `fit`", "preempted", "", ("LP095",),
        ("LP706",), keys=(f"{_LIGHTNING}slurm.py",)),
    Row("SLURM_JOB_ID", "detection, and the main port derived from the job id", "not-a-failure",
        "SLURM sets it; a stale one in an interactive shell is SLURM_JOB_NAME's case",
        keys=(f"{_LIGHTNING}slurm.py",)),
    Row("SLURM_JOB_NAME", "`bash` or `interactive`: Lightning treats the job as unmanaged and launches its own "
        "processes; across several nodes each node runs alone", "open",
        "an interactive SLURM job name with num_nodes > 1", later=("LP712",), keys=(f"{_LIGHTNING}slurm.py",)),
    Row("SLURM_PROCID", "the global rank", "not-a-failure", "srun sets SLURM_PROCID, SLURM_LOCALID and SLURM_NODEID "
        "consistently with SLURM_NTASKS (checked above)", keys=(f"{_LIGHTNING}slurm.py",)),
    Row("SLURM_LOCALID", "the local rank", "not-a-failure", "set by srun (see SLURM_PROCID)",
        keys=(f"{_LIGHTNING}slurm.py",)),
    Row("SLURM_NODEID", "the node rank", "not-a-failure", "set by srun (see SLURM_PROCID)",
        keys=(f"{_LIGHTNING}slurm.py",)),
    Row("SLURM_NODELIST", "the main address is its first host: a host the other nodes cannot resolve hangs the "
        "rendezvous", "unknowable", "name resolution between the nodes is a fact of the network at `fit`",
        keys=(f"{_LIGHTNING}slurm.py",)),
    Row("LSB_JOBID", "LSF detection", "not-a-failure", "LSF sets it", keys=(f"{_LIGHTNING}lsf.py",)),
    Row("LSB_DJOB_RANKFILE", "absent or unreadable: LSFEnvironment raises when it reads the hosts", "open",
        "LSFEnvironment selected while LSB_DJOB_RANKFILE is unset or names no readable file",
        keys=(f"{_LIGHTNING}lsf.py",)),
    Row("JSM_NAMESPACE_SIZE", "other than devices × num_nodes: the ranks jsrun starts and Lightning's world differ",
        "open", "JSM_NAMESPACE_SIZE other than devices × num_nodes under LSF", later=("LP714",),
        keys=(f"{_LIGHTNING}lsf.py",)),
    Row("JSM_NAMESPACE_RANK", "the global rank", "not-a-failure", "jsrun sets it consistently with "
        "JSM_NAMESPACE_SIZE", keys=(f"{_LIGHTNING}lsf.py",)),
    Row("JSM_NAMESPACE_LOCAL_RANK", "the local rank", "not-a-failure", "jsrun sets it (see JSM_NAMESPACE_RANK)",
        keys=(f"{_LIGHTNING}lsf.py",)),
    Row("TORCHELASTIC_USE_AGENT_STORE", "`True`: env:// connects to the agent's store instead of creating one",
        "not-a-failure", "torchrun sets it for the processes it starts", keys=("torch/distributed/rendezvous.py",)),
    Row("USE_LIBUV", "the TCPStore backend", "not-a-failure", "either value works",
        keys=("torch/distributed/rendezvous.py",)),
)  # fmt: skip

VARIABLE_FILES = ("lightning/fabric/plugins/environments/*.py", "torch/distributed/rendezvous.py")
"""The sources whose variables the table lists (``lightning.pytorch``'s environments re-export Fabric's)."""
_VARIABLE = re.compile(r"[A-Z][A-Z0-9_]{2,}")


def variables_read(roots: Mapping[str, Path]) -> dict[str, tuple[str, ...]]:
    """Every upper-case string literal (a variable's name) in those sources, with the files that name it
    (``roots``: where each top-level package, ``lightning`` and ``torch``, is installed: the folder holding it)."""
    found: dict[str, set[str]] = {}
    for pattern in VARIABLE_FILES:
        root = roots[pattern.split("/")[0]]
        for path in sorted(root.glob(pattern)):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and _VARIABLE.fullmatch(node.value):
                    found.setdefault(node.value, set()).add(str(path.relative_to(root)))
    return {name: tuple(sorted(files)) for name, files in found.items()}


def variable_problems(read: dict[str, tuple[str, ...]], lightning: str) -> list[str]:
    """How the table differs from what the installed sources (Lightning ``lightning``) read."""
    listed = {row.subject: row.keys for row in VARIABLES if not row.releases or lightning in row.releases}
    problems = [f"variable {name} is read by {', '.join(read[name])} but not listed" for name in read
                if name not in listed]  # fmt: skip
    problems += [f"variable {name} is listed but no longer read" for name in listed if name not in read]
    problems += [f"variable {name}: read by {read[name]}, listed as {files}" for name, files in listed.items()
                 if name in read and read[name] != files]  # fmt: skip
    return problems


def row_problems(rows: Iterable[Row], codes: dict[str, str], early: tuple[str, ...]) -> list[str]:
    """A status each row can have, its codes documented (and early enough where they pre-empt)."""
    problems = []
    for row in rows:
        if row.status not in ("construction", "preempted", "unknowable", "open", "not-a-failure"):
            problems.append(f"{row.subject}: status {row.status!r}")
        if (row.status == "preempted") != bool(row.codes) or (row.status not in ("preempted",) and not row.detail):
            problems.append(f"{row.subject}: preempted takes codes; the other statuses take a detail")
        problems += [f"{row.subject}: {code} is no documented code" for code in (*row.codes, *row.later)
                     if code not in codes]  # fmt: skip
        problems += [f"{row.subject}: {code} fires at the {codes[code]} stage: use later" for code in row.codes
                     if code in codes and codes[code] not in early]  # fmt: skip
    return problems


def argument_problems(parameters: dict[str, set[str]], keys: set[str]) -> list[str]:
    """The settings' Lightning arguments are parameters of their class (``parameters``: class -> names) and their
    DeepSpeed keys are names DeepSpeed's config sources use (``keys``)."""
    problems = []
    for row in SETTINGS:
        for argument in row.arguments:
            owner, name = argument.split(".")
            if name not in parameters.get(owner, set()):
                problems.append(f"{row.subject}: {owner} has no parameter {name}")
        problems += [f"{row.subject}: DeepSpeed names no config key {key!r}" for key in row.keys if key not in keys]
    return problems


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _detail(row: Row) -> str:
    parts = [", ".join(row.codes)] if row.codes else []
    parts += [row.detail] if row.detail else []
    parts += ["later: " + ", ".join(row.later)] if row.later else []
    return _cell("; ".join(parts))


def render_settings() -> list[str]:
    lines = [f"## Settings both Lightning and a DeepSpeed config can set ({len(SETTINGS)})", "",
             "When a setting has a Lightning side (a Trainer or Fabric argument, or one of DeepSpeedStrategy's) and a "
             "DeepSpeed config key, one of them takes effect: which, and what the presets report.", "",
             "| setting (Lightning / DeepSpeed) | which wins | status | detail |",
             "| --- | --- | --- | --- |"]  # fmt: skip
    lines += [f"| {_cell(row.subject)} | {_cell(row.wins)} | {row.status} | {_detail(row)} |" for row in SETTINGS]
    return lines


def render_variables() -> list[str]:
    lines = [f"## Launch variables ({len(VARIABLES)})", "",
             "Every variable Lightning's cluster environments and torch's env:// rendezvous read (a test compares the "
             "list with their sources), what goes wrong when it is wrong, and what the presets report. A missing "
             "variable rarely fails under Lightning: an environment is selected only when its own variables are set, "
             "Lightning's own supplies defaults, and Lightning exports what env:// needs before it connects.", "",
             "| variable | read by | when wrong | status | detail |", "| --- | --- | --- | --- | --- |"]  # fmt: skip
    for row in VARIABLES:
        readers = ", ".join(f"`{Path(file).stem}`" for file in row.keys)
        readers += f" (Lightning {', '.join(row.releases)})" if row.releases else ""
        lines.append(f"| `{row.subject}` | {readers} | {_cell(row.wins)} | {row.status} | {_detail(row)} |")
    return lines


# --- what the installed sources name ---------------------------------------------------------------------------------

INIT_OWNERS = {
    "Trainer": "lightning/pytorch/trainer/trainer.py",
    "Fabric": "lightning/fabric/fabric.py",
    "DeepSpeedStrategy": "lightning/pytorch/strategies/deepspeed.py",
}
"""The classes whose ``__init__`` parameters the settings name, and their source files."""


def init_parameters(site_packages: Path) -> dict[str, set[str]]:
    """Each class's ``__init__`` parameter names, read from its source."""
    found: dict[str, set[str]] = {}
    for owner, file in INIT_OWNERS.items():
        path = site_packages / file
        if not path.exists():
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.name == owner:
                init = next(n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
                arguments = [*init.args.posonlyargs, *init.args.args, *init.args.kwonlyargs]
                found[owner] = {argument.arg for argument in arguments}
    return found


def deepspeed_keys(site_packages: Path) -> set[str]:
    """The names DeepSpeed's runtime sources give config keys: string literals and pydantic field names."""
    keys: set[str] = set()
    for path in (site_packages / "deepspeed" / "runtime").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                keys.add(node.value)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                keys.add(node.target.id)
    return keys
