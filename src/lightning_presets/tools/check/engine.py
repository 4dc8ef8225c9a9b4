"""The check engine behind ``lightning-presets check``: validate a job without launching anything.

It builds the real ``Trainer``/``Fabric`` on simulated hardware (GPU count, compute capability,
cluster variables), through the same guards as a user's script, and reports every finding:
the presets' guards, Lightning's own construction errors (LP700) and the cluster-consistency
checks (LP701+). It never initializes CUDA, never starts a process and never creates a process group.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import time
import warnings
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

from lightning_presets import _api
from lightning_presets.checkpoints import local_path
from lightning_presets.core.codes import Code
from lightning_presets.core.context import Context, Options
from lightning_presets.core.findings import Finding, PresetConfigError, PresetWarning, UsageError
from lightning_presets.core.preset import Preset
from lightning_presets.core.rules import run_rules
from lightning_presets.inspection import arguments
from lightning_presets.registry import catalog, private
from lightning_presets.registry.overrides import accepted
from lightning_presets.registry.variables import variable_findings
from lightning_presets.tools import simulation as _simulation
from lightning_presets.tools.check import cluster as _cluster
from lightning_presets.tools.check import construct as _construct
from lightning_presets.tools.check import machine as _machine
from lightning_presets.tools.check import names as _names
from lightning_presets.tools.check import stages as _stages
from lightning_presets.tools.check.request import CheckReport, CheckRequest, Evidence, Reported, Source, parse_value
from lightning_presets.tools.check.resolved import Resolved, resolve
from lightning_presets.tools.simulation.lightning import interactive_session, selected_environment

LIGHTNING_REJECTED = _names.lightning_refuses(
    "LP700", "Lightning rejected the configuration", fails="--accelerator cpu --devices 0 --strategy ddp",
    fixed="--accelerator cpu --devices 2 --strategy ddp", evidence="Lightning's own exception",
)  # fmt: skip

UNKNOWN_STRATEGY_ARGUMENT = _names.lightning_refuses(
    "LP715", "an override key a Lightning strategy does not take",
    fails="--accelerator cuda --gpus 8 --devices 8 --strategy fsdp --set sharding_stratgy=FULL_SHARD",
    fixed="--accelerator cuda --gpus 8 --devices 8 --strategy fsdp --set sharding_strategy=FULL_SHARD",
    evidence="Lightning's DDPStrategy passes it to DistributedDataParallel in fit: TypeError 'unexpected keyword "
    "argument'",
)  # fmt: skip

CODES: tuple[Code, ...] = (LIGHTNING_REJECTED, *_names.CODES, *_cluster.CLUSTER_RULES, UNKNOWN_STRATEGY_ARGUMENT)
"""The documented codes of the check itself (``--model``'s are ``tools.plan.fit.CODES``)."""
FABRIC_KEYS = ("accelerator", "strategy", "devices", "num_nodes", "precision", "plugins")
"""The arguments of ``Fabric(...)`` a check passes on (the Trainer takes many more)."""
TRAINER_SETTINGS = ("accumulate_grad_batches",)
"""Trainer arguments that ``--set`` may carry too: guards read them, but they are not strategy arguments."""


class _Collector:
    def __init__(self) -> None:
        self.items: list[Reported] = []

    def add(self, findings: list[Finding] | tuple[Finding, ...], source: Source, level: Evidence) -> None:
        known = {(each.finding.code, each.finding.message) for each in self.items}
        for finding in findings:
            if (finding.code, finding.message) not in known:
                known.add((finding.code, finding.message))
                self.items.append(Reported(finding=finding, source=source, level=level))

    def drop(self, code: str) -> None:
        self.items = [each for each in self.items if each.finding.code != code]

    @property
    def has_error(self) -> bool:
        return any(each.finding.severity == "error" for each in self.items)

    def ordered(self) -> tuple[Reported, ...]:
        return tuple(sorted(self.items, key=lambda each: each.finding.severity != "error"))


def _preset(name: Any) -> Preset | None:
    if not isinstance(name, str):
        return None
    return catalog.strategy_catalog().presets.get(name)


def _dependencies(request: CheckRequest, strategy: Any) -> tuple[str, ...]:
    """The optional modules the requested strategy preset and precision presets import when they are built."""
    presets: list[Any] = [_preset(strategy.lower() if isinstance(strategy, str) else strategy)]
    presets += [catalog.precision_catalog().presets.get(name) for name in request.plugins]
    return tuple(requirement.module for each in presets if each is not None for requirement in each.requires)


def _requested(request: CheckRequest, effective: Mapping[str, Any]) -> tuple[str, int | None]:
    """The accelerator and devices per node the job asks for, read as Lightning reads them on the simulated node."""
    visible = _visible_gpus(request.gpus, request.env.get("CUDA_VISIBLE_DEVICES"))
    with _simulation.simulated_cuda(visible, request.gpu_capability, only_imported=True), _simulation.without_mps():
        accelerator = arguments.accelerator(effective.get("accelerator", _names.AUTO))
    try:
        devices = arguments.requested_devices(effective.get("devices", _names.AUTO), accelerator, visible)
    except ValueError as error:
        raise UsageError(f"{error}: a check simulates at most {MAX_DEVICES_PER_NODE} devices per node") from None
    return accelerator, devices


def _requested_nodes(arguments: Mapping[str, Any]) -> int:
    value = arguments.get("num_nodes", 1)
    return value if type(value) is int and value > 0 else 1


def _visible_gpus(gpus: int, visible: str | None) -> int:
    if visible is None:
        return gpus
    entries = [entry.strip() for entry in visible.split(",") if entry.strip()]
    count = 0
    for entry in entries:  # CUDA stops at the first invalid index
        if re.fullmatch(r"[0-9]+", entry) and (len(entry) > 18 or int(entry) >= gpus):
            break
        count += 1
    return min(count, gpus)


def _effective(request: CheckRequest) -> dict[str, Any]:
    """The arguments Lightning will use: ``PL_TRAINER_*`` (or Fabric's ``LT_*``) defaults under the explicit ones."""
    prefix = "PL_TRAINER_" if request.mode == "trainer" else "LT_"
    defaults = {}
    for key in ("accelerator", "devices", "num_nodes", "strategy", "precision"):
        variable = prefix + key.upper()
        raw = request.env.get(variable, os.environ.get(variable))
        if raw:
            defaults[key] = parse_value(raw)
    return {**defaults, **request.arguments}


@contextlib.contextmanager
def _simulation_of(
    request: CheckRequest, devices: int, nodes: int, preload: tuple[str, ...] = ()
) -> Iterator[tuple[dict[str, str], int]]:
    """Simulated GPUs, no MPS, the cluster's variables, ``--env`` and (optionally) an interactive session.

    Yields the variables the job sees (cluster ones and ``CUDA_VISIBLE_DEVICES``) and the GPUs visible.
    """
    with contextlib.ExitStack() as stack:
        variables = stack.enter_context(
            _simulation.simulated_cluster(request.cluster, devices, nodes, dict(request.env))
        )
        if "CUDA_VISIBLE_DEVICES" not in request.env:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        visible = _visible_gpus(request.gpus, os.environ.get("CUDA_VISIBLE_DEVICES"))
        stack.enter_context(
            _simulation.simulated_cuda(
                visible, request.gpu_capability, request.gpu_memory, only_imported=True, preload=preload
            )
        )
        stack.enter_context(_simulation.without_mps())
        if request.interactive:
            stack.enter_context(interactive_session())
        job_env = {name: value for name, value in os.environ.items() if _simulation.is_cluster_variable(name)}
        if "CUDA_VISIBLE_DEVICES" in os.environ:
            job_env["CUDA_VISIBLE_DEVICES"] = os.environ["CUDA_VISIBLE_DEVICES"]
        job_env.update({key: value for key, value in variables.items() if key not in job_env})
        if request.cluster == "lsf" and "LSB_DJOB_RANKFILE" not in request.env:
            job_env["LSB_DJOB_RANKFILE"] = "<generated rank file>"
        yield job_env, visible


def _override_findings(name: str, strategy_cls: Any, overrides: Mapping[str, Any], constructor: str) -> list[Finding]:
    """LP715 for each ``--set`` key a Lightning strategy does not take (the reading ``lightning_presets.strategy``
    uses for presets, ``registry.overrides``)."""
    taken = accepted(strategy_cls)
    valid = ", ".join(sorted(taken.keys))
    return [
        UNKNOWN_STRATEGY_ARGUMENT.finding(
            f"`{constructor}(strategy={name!r})` with {key}=...: {key!r} is not an argument of "
            f"{getattr(strategy_cls, '__name__', name)}",
            (f"did you mean {close!r}? " if close else "") + f"valid keys: {valid}",
        )
        for key, close in taken.unknown(overrides)
    ]


def _strategy_argument(request: CheckRequest, name: Any, out: _Collector) -> Any:
    """The value for ``strategy=``: the name itself, or an instance when ``--set`` overrides were given."""
    build = getattr(name, "build", None)  # a class_path strategy from --config, built inside the simulation
    if callable(build):
        try:
            return build()
        except Exception as error:
            out.add([_lightning_finding(error, request)], "lightning", "syntax")
            return None
    if not request.overrides:
        return name
    if not isinstance(name, str) or name.lower() == _names.AUTO:
        raise UsageError("--set needs a named strategy: pass --strategy NAME (a preset or a Lightning strategy)")
    name = name.lower()  # as Lightning's connector does
    if _preset(name) is not None:
        try:
            return _api.strategy(name, target=request.mode, **request.overrides)
        except PresetConfigError as error:
            out.add(error.findings, "guard", "syntax")
            return None
        except Exception as error:
            if _raised_in_this_package(error):
                raise  # our bug: reported as an internal error, never as the user's configuration
            out.add([_lightning_finding(error, request)], "lightning", "syntax")  # the strategy's own constructor
            return None
    registry = _names.strategy_registry(request.package)
    if name not in registry:  # e.g. an unknown PL_TRAINER_STRATEGY: the names check reports it
        out.add(_names.check_strategy(name, request.package, request.constructor), "check", "syntax")
        return None
    entry: dict[str, Any] = registry[name]
    unknown = _override_findings(name, entry["strategy"], request.overrides, request.constructor)
    out.add(unknown, "check", "syntax")
    if unknown:
        return None
    try:
        return entry["strategy"](**{**entry["init_params"], **request.overrides})
    except Exception as error:
        out.add([_lightning_finding(error, request)], "lightning", "syntax")
        return None


def _plugin_instances(request: CheckRequest, out: _Collector) -> list[Any] | None:
    if not request.plugins:
        return []
    instances = []
    for name in request.plugins:
        try:
            instances.append(_api.precision(name, target=request.mode))
        except PresetConfigError as error:
            out.add(error.findings, "guard", "syntax")
            return None
    return instances


_PACKAGE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _raised_in_this_package(error: BaseException) -> bool:
    """Whether the innermost frame of ``error``'s traceback is this package's code (not Lightning's, DeepSpeed's or
    the standard library's, which the preset's strategy constructor calls with the user's ``--set`` values)."""
    tb = error.__traceback__
    last = None
    while tb is not None:
        last = tb
        tb = tb.tb_next
    if last is None:
        return False
    return os.path.abspath(last.tb_frame.f_code.co_filename).startswith(_PACKAGE + os.sep)


def _lightning_finding(error: BaseException, request: CheckRequest) -> Finding:
    text = str(error).strip() or type(error).__name__
    if isinstance(error, KeyError) and error.args:
        text = f"KeyError: {error.args[0]!r}"
    return LIGHTNING_REJECTED.finding(
        text,
        f"Lightning raised {type(error).__name__} while building `{request.call()}`; "
        "change the argument it names and check again",
    )


def _syntax_guards(
    request: CheckRequest, preset: Preset, effective: Mapping[str, Any], accelerator: str, devices: int | None
) -> list[Finding]:
    """The preset's guards on the requested values, for when Lightning stopped before they could run.

    The values are read as Lightning reads them (``inspection.arguments``); which precision plugin Lightning would have
    picked is not known without constructing, so the rules that read the plugin do not decide. With a precision
    preset (``--plugin``) only the options rules run.
    """
    values = {**preset.init_params, **request.overrides}
    options = Options(preset=preset.name, target=request.mode, values=values, overrides=dict(request.overrides))
    if request.plugins:
        return run_rules(preset.rules, "options", options)
    context = Context(
        preset=preset.name,
        target=request.mode,
        kind=request.mode,
        accelerator=accelerator,
        devices_per_node=devices or 1,
        num_nodes=_requested_nodes(effective),
        precision=arguments.precision(effective.get("precision")),
        precision_plugin=None,
        cluster_environment="LightningEnvironment",
        options=MappingProxyType(values),
        family=preset.family,
        precision_preset=None,
        gpu_capability=request.gpu_capability if accelerator == "cuda" and request.gpus else None,
    )
    return run_rules(preset.rules, "options", options) + run_rules(preset.rules, "construction", context)


def _syntax(request: CheckRequest, arguments: Mapping[str, Any], out: _Collector) -> None:
    strategy = arguments.get("strategy")
    if isinstance(strategy, str):
        out.add(_names.check_strategy(strategy.lower(), request.package, request.constructor), "check", "syntax")
    if "precision" in arguments:
        out.add(_names.check_precision(str(arguments["precision"]), request.constructor), "check", "syntax")
    accelerator = arguments.get("accelerator")
    if isinstance(accelerator, str):
        out.add(_names.check_accelerator(accelerator, request.package, request.constructor), "check", "syntax")
    for name in request.plugins:
        out.add(_names.check_plugin(name, request.constructor), "check", "syntax")


def _factory(request: CheckRequest) -> Any:
    if request.mode == "trainer":
        from lightning.pytorch import Trainer

        return Trainer
    from lightning.fabric import Fabric

    return Fabric


def _build(
    request: CheckRequest, arguments: Mapping[str, Any], effective: Mapping[str, Any], out: _Collector
) -> _construct.Outcome | None:
    """Construct the Trainer/Fabric (inside the simulation); ``None`` when the syntax checks already failed."""
    strategy_name = arguments.get("strategy", effective.get("strategy", _names.AUTO))
    with warnings.catch_warnings(record=True) as caught:  # the presets' options warnings (LP302, LP609, ...)
        warnings.simplefilter("always")
        strategy_value = _strategy_argument(request, strategy_name, out)
        plugins = _plugin_instances(request, out)
    out.add([each.message.finding for each in caught if isinstance(each.message, PresetWarning)], "guard", "syntax")
    if out.has_error:
        return None
    kwargs = dict(arguments)
    if isinstance(kwargs.get("plugins"), list):  # class_path plugins from --config, built inside the simulation
        kwargs["plugins"] = [each.build() if callable(getattr(each, "build", None)) else each
                             for each in kwargs["plugins"]]  # fmt: skip
    if "strategy" in arguments or request.overrides:
        kwargs["strategy"] = strategy_value
    if plugins:
        kwargs["plugins"] = [*kwargs.get("plugins", []), *plugins]
    if request.mode == "trainer":
        kwargs.update(_construct.TRAINER_QUIET)
    else:
        kwargs = {key: value for key, value in kwargs.items() if key in FABRIC_KEYS}
    return _construct.construct(_factory(request), kwargs)


def _resolved(outcome: _construct.Outcome, kind: str) -> Resolved | None:
    """What Lightning resolved, once it got as far as setting the strategy up (even if it then rejected it)."""
    strategy = outcome.strategy
    reached = outcome.built is not None or outcome.context is not None or private.launcher_of(strategy)
    return resolve(strategy, kind) if strategy is not None and reached else None


MAX_DEVICES_PER_NODE = 4096
"""The most devices (and simulated GPUs) per node a check builds: Lightning makes a list of them."""
MAX_NODES = 2**17


def _within_limits(gpus: int, devices: int | None, nodes: int) -> None:
    """A usage error for sizes no cluster has, before Lightning builds lists of that many devices or ranks."""
    for what, value, limit in (("GPUs per node (--gpus)", gpus, MAX_DEVICES_PER_NODE),
                               ("devices per node", devices or 0, MAX_DEVICES_PER_NODE),
                               ("num_nodes", nodes, MAX_NODES)):  # fmt: skip
        if value > limit:
            raise UsageError(f"{what} {value} is more than a check simulates (at most {limit})")
    if (devices or 1) * nodes > _simulation.MAX_PROCESSES:
        raise UsageError(f"devices={devices} × num_nodes={nodes} = {(devices or 1) * nodes} processes is more than a "
                         f"check simulates (at most {_simulation.MAX_PROCESSES})")  # fmt: skip


def _settings_out_of_overrides(request: CheckRequest) -> CheckRequest:
    """``--set accumulate_grad_batches=4`` is the Trainer's argument, not the strategy's: move it over."""
    moved = {key: value for key, value in request.overrides.items() if key in TRAINER_SETTINGS}
    if not moved or request.mode != "trainer":
        return request
    overrides = {key: value for key, value in request.overrides.items() if key not in moved}
    return dataclasses.replace(request, arguments={**moved, **request.arguments}, overrides=overrides)


def check_job(request: CheckRequest, model_timeout_s: float | None = None) -> CheckReport:
    """Validate ``request``: names, construction, cluster (``--model``'s memory plan is added by
    :func:`lightning_presets.tools.verdict.run_check`). Never raises for a bad configuration, only
    :class:`UsageError` for a bad request."""
    request = _settings_out_of_overrides(request)
    if request.mode not in ("trainer", "fabric"):
        raise UsageError(f"mode {request.mode!r} is not 'trainer' or 'fabric'")
    if request.cluster not in _simulation.CLUSTERS:
        raise UsageError(f"--cluster {request.cluster!r} is not one of {', '.join(_simulation.CLUSTERS)}")
    if request.resume_from is not None:
        local = local_path(request.resume_from)  # None: a remote (fsspec) URL, which Lightning reads, not us
        # lexists: a symbolic link loop is there, and reported as fit reports it (LP809), not as missing
        if local is not None and not os.path.lexists(local):
            raise UsageError(f"--resume-from {request.resume_from!r}: no such file or folder here")
    _factory(request)
    start = time.perf_counter()  # imports done: what follows is the check itself
    out = _Collector()
    arguments = dict(request.arguments)
    if isinstance(arguments.get("strategy"), str):
        arguments["strategy"] = arguments["strategy"].lower()
    effective = _effective(request)
    _syntax(request, arguments, out)
    accelerator, devices = _requested(request, effective)
    nodes = _requested_nodes(effective)
    _within_limits(request.gpus, devices, nodes)
    outcome = _construct.Outcome()
    preload = _dependencies(request, effective.get("strategy"))
    with _simulation_of(request, devices or 1, nodes, preload) as (job_env, visible):
        if not out.has_error:
            outcome = _build(request, arguments, effective, out) or outcome
        detected = selected_environment(request.mode)
    evidence: Evidence = "construction" if outcome.attempted else "syntax"
    out.add(outcome.findings, "guard", "construction")
    out.add(_stages.trainer_findings(outcome), "guard", "construction")
    out.add(_stages.resume_findings(request, outcome), "guard", "construction")
    if not out.has_error:
        decided = _stages.model_findings(request, outcome, model_timeout_s)
        for code in decided.decided:
            out.drop(code)  # the conditional warning the construction gave: decided now
        out.add(decided.findings, "guard", "construction")
        if decided.notes:
            request = dataclasses.replace(request, notes=(*request.notes, *decided.notes))
        out.add(_stages.model_conditions(request, outcome), "model", "construction")
    if outcome.error is not None:
        out.add([_lightning_finding(outcome.error, request)], "lightning", "construction")
    preset = _preset(effective.get("strategy"))
    if preset is not None and outcome.context is None and not any(e.source == "check" for e in out.items):
        out.add(_syntax_guards(request, preset, effective, accelerator, devices), "guard", "syntax")
    resolved = _resolved(outcome, request.mode)
    launcher = private.launcher_of(outcome.strategy)
    name = effective.get("strategy", _names.AUTO)
    target = _cluster.Target(
        kind=request.mode,
        strategy=name.lower() if isinstance(name, str) else type(name).__name__,
        accelerator=resolved.accelerator if resolved else accelerator,
        devices=resolved.devices_per_node if resolved else devices,
        requested_devices=devices,
        devices_argument=effective.get("devices"),
        num_nodes=resolved.num_nodes if resolved else nodes,
        env=job_env,
        gpus_visible=visible,
        gpus_per_node=request.gpus,
        interactive=request.interactive,
        interactive_compatible=getattr(launcher, "is_interactive_compatible", None),
        environment=resolved.cluster_environment if resolved else detected.environment,
        environment_refusal=None if resolved else detected.refusal,
    )
    cluster = _cluster.cluster_findings(target)
    for superseded, rules in _cluster.SUPERSEDES.items():  # construction's launch findings, said by check's rules
        if {finding.code for finding in cluster} & {each.code for each in rules}:
            out.drop(superseded)
    refused = outcome.error is not None and _lightning_finding(outcome.error, request).message == detected.refusal
    if refused and {finding.code for finding in cluster} & {each.code for each in _cluster.REFUSAL_RULES}:
        out.drop(LIGHTNING_REJECTED.code)  # Lightning's refusal, said by the check rule that reads it
    out.add(cluster, "check", evidence)
    out.add(_machine.machine_findings(target), "check", evidence)
    out.add(variable_findings(), "check", evidence)
    simulated = {
        "gpus_per_node": request.gpus,
        "gpus_visible": visible,
        "gpu_capability": f"{request.gpu_capability[0]}.{request.gpu_capability[1]}",
        "gpu_memory_bytes": request.gpu_memory,
        "cluster": request.cluster,
        "interactive": request.interactive,
        "environment": dict(sorted(job_env.items())),
    }
    return CheckReport(
        request=request,
        reported=out.ordered(),
        evidence=evidence,
        constructed=outcome.built is not None,
        resolved=resolved,
        lightning_warnings=tuple(dict.fromkeys(outcome.warnings)),
        simulated=simulated,
        elapsed_ms=(time.perf_counter() - start) * 1000,
    )
