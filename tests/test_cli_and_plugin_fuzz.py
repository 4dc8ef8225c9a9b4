"""A fuzz of the whole command line (every command and flag with hostile values) and of the plugin surface
(generated presets with fields of any type and rules that raise, exit or return garbage).

Whatever the input, a command exits 0, 1 or 2 with a message, never a traceback or an "internal error", each
run takes bounded time, and memory stays bounded across the run; a hostile plugin costs only its own presets. The
budget is fixed (``derandomize``: the same examples every run, so CI is reproducible); raise ``LP_FUZZ_EXAMPLES``
or ``LP_FUZZ_PLUGINS`` to search further locally.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import resource
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import reference_check_seconds
from lightning_presets import cli
from lightning_presets.cli import _matrix as matrix_cli
from lightning_presets.cli import main
from lightning_presets.tools import verdict as _verdict

EXAMPLES = int(os.environ.get("LP_FUZZ_EXAMPLES", "300"))
COST_PER_RUN = 2000
"""A fuzzed command's CPU time, at most, in small checks' (``helpers.REFERENCE_CHECK``, about 7 ms here, measured in
the same run): the first import of an optional package costs about 150 of them; a hang or a bomb far more."""
MEMORY_GROWTH = 512 * 2**20
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,  # costed below, in CPU time against a small check measured in the same run
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.fixture(scope="module", autouse=True)
def _reference() -> None:
    """The small check every fuzzed command's cost is compared with, measured before any test patches anything."""
    reference_check_seconds()


HOSTILE_TEXT = (
    "", " ", "\t", "-", "--", "=", "==", "-1", "0", "1", "2", "8", "1e400", "-1e400", "nan", "inf", "0x10", "1_000",
    "1" + "0" * 400, "9" * 5000, "1.5", "80", "80GiB", "0.0001GiB", "1" + "0" * 30 + "TiB", "auto", "AUTO", "None",
    "True", "[]", "{}", "()", "[" * 500, "(" * 5000, "'", '"', "\\", "\x7f", "é", "💥", "\u202e", "a" * 10000,
    "${HOME}", "$(touch /tmp/lp-fuzz-ran)", "`id`", "../../etc/passwd", "/dev/zero", "/dev/full", "/", "/proc/self/mem",
    "__import__('os').system('id')", "lambda: 0", "subprocess.call", "os:abort", "builtins:input", "sys:exit",
)  # fmt: skip
NAMES = (
    "auto", "ddp", "DDP", "fsdp", "fsdp2", "FSDP2", "tp2d_hybrid", "fsdp_offload_ckpt", "deepspeed_zero2_offload",
    "xla_fsdp_ckpt", "ddp_static_graph", "single_device", "cpu", "cuda", "gpu", "mps", "tpu", "32-true", "bf16-mixed",
    "16-mixed", "64-true", "transformer-engine", "bf16-fp32-reduce", "nf4-bnb", "fp8-te", "fp8-torchao",
)  # fmt: skip
ENV_NAMES = (
    "PL_TRAINER_STRATEGY", "PL_TRAINER_DEVICES", "PL_TRAINER_ACCELERATOR", "PL_TRAINER_PRECISION",
    "PL_TRAINER_NUM_NODES", "LT_STRATEGY", "LT_DEVICES", "LT_ACCELERATOR", "SLURM_NTASKS", "SLURM_NTASKS_PER_NODE",
    "SLURM_NNODES", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "RANK", "CUDA_VISIBLE_DEVICES", "LSB_DJOB_RANKFILE",
    "JSM_NAMESPACE_SIZE", "MASTER_PORT", "",
)  # fmt: skip
SET_KEYS = ("cpu_offload", "tensor_parallel_size", "data_parallel_size", "sharding_strategy", "find_unused_parameters",
            "process_group_backend", "device_mesh", "stage", "", "__class__")  # fmt: skip

text = st.one_of(st.sampled_from(HOSTILE_TEXT), st.sampled_from(NAMES), st.text(max_size=40))
number = st.one_of(st.integers(-(10**6), 10**12).map(str), st.sampled_from(HOSTILE_TEXT))
size = st.one_of(
    st.builds("{}{}".format, st.integers(0, 10**7), st.sampled_from(("GiB", "GB", "B", "TiB", "kb", "", " MiB"))),
    st.sampled_from(HOSTILE_TEXT),
)


def pairs(keys: tuple[str, ...]) -> st.SearchStrategy[str]:
    return st.builds(lambda key, value: f"{key}={value}", st.one_of(st.sampled_from(keys), text), text)


@pytest.fixture(scope="module")
def configs(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Config files: valid, hostile (alias bomb, UTF-16, deep, huge, code), and paths that are not files."""
    root = tmp_path_factory.mktemp("fuzz_configs")
    bomb = ['l0: &l0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    bomb += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)]
    files: dict[str, bytes] = {
        "valid.yaml": b"trainer:\n  strategy: ddp\n  accelerator: cpu\n  devices: 2\n",
        "preset.yaml": b"trainer:\n  strategy: tp2d_hybrid\n  accelerator: cpu\n  devices: 2\n",
        "bomb.yaml": ("\n".join(bomb) + "\ntrainer:\n  devices: *l8\n").encode(),
        "utf16.yaml": "trainer:\n  strategy: ddp\n".encode("utf-16"),
        "deep.yaml": b"trainer:\n  x: " + b"[" * 3000 + b"]" * 3000 + b"\n",
        "huge.yaml": b"# " + b"x" * (2**20) + b"\n",
        "code.yaml": b"trainer:\n  strategy:\n    class_path: subprocess.call\n    init_args: {args: [id]}\n",
        "tag.yaml": b"trainer: !!python/object/apply:os.system ['id']\n",
        "list.yaml": b"- 1\n- 2\n",
        "bad.yaml": b"trainer: [\n",
        "strategy_args.yaml": b"trainer:\n  strategy:\n    class_path: lightning.pytorch.strategies.DDPStrategy\n"
        b"    init_args: {no_such_argument: 1}\n",
    }
    for name, content in files.items():
        (root / name).write_bytes(content)
    return [str(root / name) for name in files] + [str(root), str(root / "missing.yaml"), "/dev/null", "/dev/zero"]


def check_argv(configs: list[str]) -> st.SearchStrategy[list[str]]:
    flags: dict[str, st.SearchStrategy[str]] = {
        "--mode": st.sampled_from(("trainer", "fabric", "Trainer", "")),
        "--accelerator": text,
        "--devices": number,
        "--num-nodes": number,
        "--strategy": text,
        "--precision": text,
        "--plugin": text,
        "--set": pairs(SET_KEYS),
        "--config": st.one_of(st.sampled_from(configs), text),
        "--gpus": number,
        "--gpu-capability": st.one_of(st.sampled_from(("8.0", "9.0", "8.9", "99999999999.0", "-1.0", "9")), text),
        "--gpu-memory": size,
        "--cluster": st.sampled_from(("none", "slurm", "torchelastic", "lsf", "pbs")),
        "--env": pairs(ENV_NAMES),
    }
    switches = ("--interactive", "--json", "--strict")
    return _argv("check", flags, switches)


def _argv(command: str, flags: dict[str, st.SearchStrategy[str]], switches: tuple[str, ...]) -> Any:
    chosen: st.SearchStrategy[list[list[str]]] = st.just([])
    if flags:
        flag = st.sampled_from(sorted(flags)).flatmap(lambda name: flags[name].map(lambda value: [name, value]))
        chosen = st.lists(flag, max_size=6)
    on = st.lists(st.sampled_from(switches), max_size=2, unique=True) if switches else st.just([])
    return st.builds(lambda pairs, extra: [command, *(part for pair in pairs for part in pair), *extra], chosen, on)


def other_argv(configs: list[str]) -> st.SearchStrategy[list[str]]:
    path = st.one_of(st.sampled_from(configs), text, st.sampled_from(("/dev/full", "/proc/version", "/nonexistent/x")))
    plan = _argv(
        "plan",
        {
            "--gpus": number,
            "--num-nodes": number,
            "--gpu-memory": size,
            "--cpu-memory": size,
            "--precision": text,
            "--optimizer": text,
            "--headroom": st.one_of(st.sampled_from(("0.3", "30%", "1", "-0.1", "nan", "inf", "%")), text),
        },
        ("--json",),
    ).map(lambda argv: [argv[0], "--params", "7B", "--gpus", "8", *argv[1:]])  # --params/--model: see the report
    return st.one_of(
        _argv("list", {}, ("--json", "--strict")),
        st.builds(lambda name, rest: ["show", name, *rest], text, st.lists(st.just("--json"), max_size=1)),
        _argv("doctor", {}, ("--json", "--strict", "--import")),
        _argv(
            "matrix",
            {
                "--format": text,
                "--output": path,
                "--check": path,
                "--mode": st.sampled_from(("trainer", "fabric", "x")),
            },
            (),
        ),
        plan,
    ) | st.lists(text, max_size=4)  # no command, an unknown one, or stray words


@contextlib.contextmanager
def small_matrix() -> Iterator[None]:
    """``matrix`` over a few real checks instead of two thousand (what is fuzzed is its flags and output)."""
    from lightning_presets.tools import matrix as _matrix

    rows = [_matrix._row(_verdict.run_check(request)) for request in itertools.islice(_matrix.requests(), 6)]
    with mock.patch.object(matrix_cli, "compute", return_value=(rows, 0.01)):
        yield


def invoke(argv: list[str]) -> tuple[int, str, str, float]:
    out, err = io.StringIO(), io.StringIO()
    start = time.process_time()  # CPU time: another process on the machine adds nothing to it
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 2)
    return code, out.getvalue(), err.getvalue(), time.process_time() - start


def assert_contained(argv: list[str]) -> None:
    code, out, err, seconds = invoke(argv)
    shown = f"{argv!r:.300}\nstdout: {out[-600:]}\nstderr: {err[-600:]}"
    assert code in (0, 1, 2), shown
    assert "Traceback" not in out + err, shown
    assert "internal error" not in err, shown
    assert "(MemoryError)" not in err, shown  # main() caught it, but a bomb is a bomb
    assert "(RecursionError)" not in err, shown
    assert seconds < COST_PER_RUN * reference_check_seconds(), f"{seconds:.1f} s of CPU: {shown}"
    if code in (0, 1) and wants_json(argv):
        json.loads(out)  # --json output is JSON, even when a plugin or Lightning prints


def wants_json(argv: list[str]) -> bool:
    """Whether the command line asks for JSON, as the real parser reads it (``show -- --json`` does not)."""
    with contextlib.redirect_stderr(io.StringIO()):
        try:
            return bool(getattr(cli._parser().parse_args(argv), "json", False))
        except SystemExit:
            return False


@contextlib.contextmanager
def address_space(extra: int = 4 * 2**30) -> Iterator[None]:
    """Cap this process's address space at its current size plus ``extra`` while fuzzing (Linux).

    A memory bomb the fuzz finds then fails the test with a MemoryError instead of taking a shared CI machine
    down; the cap is lifted afterwards.
    """
    statm = Path("/proc/self/statm")
    if not statm.exists():
        yield
        return
    size = int(statm.read_text().split()[0]) * resource.getpagesize()
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = size + extra if hard == resource.RLIM_INFINITY else min(size + extra, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def max_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kilobytes on Linux


@pytest.fixture(scope="module")
def baseline() -> int:
    """Peak memory once every command has run once (imports done)."""
    for argv in (["check", "--strategy", "ddp"], ["list"], ["doctor"], ["plan", "--params", "7B", "--gpus", "8"]):
        invoke(argv)
    return max_rss()


def test_fuzz_check(configs: list[str], baseline: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # relative paths the fuzz makes up land here

    @FUZZ
    @given(argv=check_argv(configs))
    def fuzz(argv: list[str]) -> None:
        assert_contained(argv)

    with address_space():
        fuzz()
    assert max_rss() - baseline < MEMORY_GROWTH
    assert not Path("/tmp/lp-fuzz-ran").exists()


def test_fuzz_every_other_command(
    configs: list[str], baseline: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # `matrix --output NAME` writes here, not into the checkout

    @FUZZ
    @given(argv=other_argv(configs))
    def fuzz(argv: list[str]) -> None:
        assert_contained(argv)

    with small_matrix(), address_space():
        fuzz()
    assert max_rss() - baseline < MEMORY_GROWTH


# --- the plugin surface (issue 16): generated presets with random field values and hostile rules -------------------

PLUGIN_EXAMPLES = int(os.environ.get("LP_FUZZ_PLUGINS", "60"))
PLUGIN_FUZZ = settings(FUZZ, max_examples=PLUGIN_EXAMPLES)

# Each field: Python source for (values of the declared type, values of another type: LP011 when the preset loads).
FIELDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "description": (('"a fuzzed preset"',), ("5", "None")),
    "family": (('"ddp"', '"model_parallel"'), ("7",)),
    "strategy": (
        ('{"trainer": "DDPStrategy", "fabric": "DDPStrategy"}', '{"fabric": "DDPStrategy"}',
         '{"trainer": "lightning.pytorch.strategies:DDPStrategy"}', '{"trainer": "NoSuchStrategy"}',
         '{"trainer": "builtins:dict"}'),
        ('{"trainer": 5}', '"DDPStrategy"', "{}", '{"cluster": "DDPStrategy"}'),
    ),
    "init_params": (("{}", '{"process_group_backend": "gloo"}', '{"find_unused_parameters": True}'),
                    ("[1, 2]", "{1: 2}", "5")),
    "extra_keys": (("frozenset()", 'frozenset({"acme_option"})'), ("5", '"abc"', "{1}")),
    "prepare": (("None", "lambda kind, values: values"), ('"drop_keys"',)),
    "resolve": (("None", "lambda strategy: {}"), ("5",)),
    "mixins": (("{}", '{"trainer": Mixin}'), ('{"trainer": 5}', "[]")),
    "tested_with": (("{}", '{"lightning": "2.6.6", "evidence": "none"}'), ('{"lightning": 2.6}', '"2.6.6"')),
    "activation_checkpointing": (("False", "True"), ('"yes"',)),
    "cpu_offload": (("False", "True"), ("1",)),
    "mesh": (("None", "MODEL_PARALLEL"), ('"2d"', "5")),
    "requires": (('()', '(Requirement(module="json", extra="json"),)',
                  '(Requirement(module="lp_fuzz_missing_module", extra="missing"),)'), ('("json",)', "None")),
}  # fmt: skip
RUNNABLE = {  # in the "rules" scenario: well-formed fields that let Trainer(...) reach the construction rules
    "strategy": ('{"trainer": "DDPStrategy", "fabric": "DDPStrategy"}',
                 '{"trainer": "lightning.pytorch.strategies:DDPStrategy", "fabric": "DDPStrategy"}'),
    "requires": ("()", '(Requirement(module="json", extra="json"),)'),
}  # fmt: skip
RULE_FIELDS = {  # (valid, malformed): a code, a severity and a stage
    "code": (('"LP901"', '"LP902"'), ('"ACME1"', "5")),
    "severity": (('"error"', '"warning"'), ('"fatal"',)),
    "stage": (('"construction"', '"options"', '"trainer"', '"model"'), ('"check"', '"bogus"')),
}
RULE_BODIES = (
    "return None",
    'return Problem("the fuzzed rule fired", "do something else")',
    'raise ValueError("the rule is broken")',
    "sys.exit(7)",
    'raise _Escape("escapes Exception")',
    'return "a string, not a Problem"',
    "return Problem(12345, None)",
    "raise _Unprintable()",
    'return Problem("m" * 100000, "h")',
    "return 1 / 0",
)
PLUGIN_HEADER = """\
import sys

from lightning_presets import Preset, Problem, Requirement, rule
from lightning_presets.core.mesh import MODEL_PARALLEL


class _Escape(BaseException):
    pass


class _Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("unprintable")


class Mixin:
    pass

"""


def field_value(draw: st.DrawFn, choices: tuple[tuple[str, ...], tuple[str, ...]], malformed: bool) -> str:
    """A well-typed value, or (``malformed``) one of either kind."""
    valid, invalid = choices
    return draw(st.sampled_from(valid + invalid if malformed else valid))


@st.composite
def fuzzed_rule(draw: st.DrawFn, index: int, malformed: bool, runs: bool) -> str:
    """A rule with a hostile body; ``runs``: a stage ``Trainer(...)`` runs (options or construction)."""
    code, severity, stage = (field_value(draw, RULE_FIELDS[key], malformed) for key in ("code", "severity", "stage"))
    if runs:
        stage = draw(st.sampled_from(('"construction"', '"options"')))
    body = draw(st.sampled_from(RULE_BODIES))
    return (
        f'@rule({code}, {severity}, {stage}, "a fuzzed rule", fails="x", fixed="y")\n'
        f"def rule_{index}(ctx, *rest):\n    {body}\n\n\n"
    )


SCENARIOS = ("rules", "rules", "rules", "fields", "name", "entry", "denied", "everything")
"""What is hostile besides the rules' bodies (always drawn): nothing else (3 in 8: well-formed presets whose rules
run in ``check`` and ``Trainer(...)``), the fields' types, the preset's name, the entry point, the trust variables,
or all of them."""


@st.composite
def fuzzed_plugin(draw: st.DrawFn) -> dict[str, Any]:
    """One distribution's module source, its preset's name, its entry point's name and value, and whether the trust
    variables deny it."""
    scenario = draw(st.sampled_from(SCENARIOS))
    hostile = {axis: scenario in (axis, "everything") for axis in ("fields", "name", "entry", "denied")}
    runs = scenario == "rules"
    count = draw(st.integers(1 if runs else 0, 2))
    rules = [draw(fuzzed_rule(index, hostile["fields"], runs)) for index in range(count)]
    fields = {name: field_value(draw, choices, hostile["fields"]) for name, choices in FIELDS.items()}
    if runs:
        fields.update({name: draw(st.sampled_from(values)) for name, values in RUNNABLE.items()})
    fields["rules"] = "(" + "".join(f"rule_{index}, " for index in range(len(rules))) + ")"
    if hostile["fields"]:
        fields["rules"] = draw(st.sampled_from((fields["rules"], '("not a rule",)', "5")))
    names = ("fuzz_{n}", "fuzz-{n}", "Fuzz_{n}", "{n}_fuzz", "ddp", "fsdp2") if hostile["name"] else ("fuzz_{n}",)
    name = draw(st.sampled_from(names))
    entry_name = draw(st.sampled_from((name, "fuzz_other_{n}"))) if hostile["entry"] else name
    kinds = ("PRESET", "make", "builtins:input", "Mixin") if hostile["entry"] else ("PRESET", "make")
    arguments = "".join(f"    {field}={value},\n" for field, value in fields.items())
    source = PLUGIN_HEADER + "".join(rules) + f"PRESET = Preset(\n    name={name!r},\n{arguments})\n\n\n"
    source += "def make():\n    return PRESET\n"
    return {"source": source, "name": name, "entry_name": entry_name, "entry": draw(st.sampled_from(kinds)),
            "denied": hostile["denied"] and draw(st.booleans()), "scenario": scenario}  # fmt: skip


def assert_cli_contained(argv: list[str]) -> dict[str, Any] | None:
    """A command on the fuzzed plugin: exit 0, 1 or 2 with a message, never a traceback or an internal error."""
    code, out, err, _ = invoke(argv)
    shown = f"{argv!r}\nstdout: {out[-600:]}\nstderr: {err[-600:]}"
    assert code in (0, 1, 2), shown
    assert "Traceback" not in out + err, shown
    assert "internal error" not in err, shown
    data: dict[str, Any] | None = json.loads(out) if code in (0, 1) and "--json" in argv else None
    return data


def trainer_outcome(name: str) -> tuple[str, str]:
    """``Trainer(strategy=name)`` on 2 CPU processes: ``built``, ``codes`` (a :class:`PresetConfigError` with its
    codes) or ``lightning`` (any other exception: Lightning's own, for a name nobody registered)."""
    import warnings

    from lightning.pytorch import Trainer

    from helpers import QUIET
    from lightning_presets import PresetConfigError

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            Trainer(strategy=name, accelerator="cpu", devices=2, **QUIET)
        except PresetConfigError as error:
            return "codes", ",".join(error.codes)
        except Exception as error:
            return "lightning", f"{name}: {type(error).__name__}: {error}"
    return "built", ""


def test_fuzz_plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hostile plugins, one per example: ``import lightning``'s registration, ``list``, ``show``, ``check`` and
    ``Trainer(...)`` work or report a code, the built-ins stay usable, and the CLI exits 0, 1 or 2. Then every
    generated plugin at once in a fresh ``python -W error``: ``import lightning`` survives them all."""
    import warnings

    from lightning.fabric.strategies.registry import _StrategyRegistry
    from lightning.pytorch.strategies import StrategyRegistry

    from _dists import Dist, write_installed
    from helpers import run_python
    from lightning_presets import presets
    from lightning_presets.core.namespaces import namespace_for_target
    from lightning_presets.guards.strategy import HEADS
    from lightning_presets.registry import bridge
    from lightning_presets.registry import catalog as _catalog

    monkeypatch.chdir(tmp_path)
    for variable in ("LIGHTNING_PRESETS_ALLOW", "LIGHTNING_PRESETS_DENY"):
        monkeypatch.delenv(variable, raising=False)
    sites: list[Path] = []
    outcomes: list[tuple[str, str]] = []  # (outcome, codes) of every Trainer(...)
    trainer_namespace = namespace_for_target("trainer")

    @PLUGIN_FUZZ
    @given(plugin=fuzzed_plugin())
    def fuzz(plugin: dict[str, Any]) -> None:
        n = len(sites)
        name, entry_name = plugin["name"].format(n=n), plugin["entry_name"].format(n=n)
        dist = Dist(f"fuzz-plugin-{n}", "0.1.0", plugin["source"], {})
        value = plugin["entry"] if ":" in plugin["entry"] else f"{dist.package}:{plugin['entry']}"
        dist = Dist(dist.name, dist.version, plugin["source"].replace("{n}", str(n)), {entry_name: value})
        site = tmp_path / f"site{n}"
        write_installed(dist, site)
        sites.append(site)
        added: list[str] = []
        sys.path.insert(0, str(site))
        if plugin["denied"]:
            os.environ["LIGHTNING_PRESETS_DENY"] = dist.name
        _catalog.clear_cache()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # `python -W error`: catalog warnings are written, never raised
                assert "fsdp2" in presets()
                fresh = _StrategyRegistry()
                bridge.register_into(fresh, trainer_namespace, HEADS)  # what `import lightning` does
            assert bridge.is_ours(fresh, "tp2d_hybrid")
            for each in {name, entry_name} & set(fresh) - set(StrategyRegistry):
                dict.__setitem__(StrategyRegistry, each, fresh[each])
                added.append(each)
            listed = assert_cli_contained(["list", "--json"])
            assert listed is not None
            assert entry_name in [row["name"] for row in listed["presets"]]
            assert_cli_contained(["show", entry_name, "--json"])
            assert_cli_contained(
                ["check", "--strategy", entry_name, "--accelerator", "cpu", "--devices", "2", "--json"]
            )
            outcome, text = trainer_outcome(entry_name)
            outcomes.append((outcome, text))
            assert outcome != "lightning" or entry_name not in added, f"{text}\n{plugin['source']}"  # ours: a code
        finally:
            for each in added:
                dict.pop(StrategyRegistry, each, None)
            sys.path.remove(str(site))
            os.environ.pop("LIGHTNING_PRESETS_DENY", None)
            sys.modules.pop(dist.package, None)
            _catalog.clear_cache()

    fuzz()
    # the fuzz reached what it is for: presets built, and hostile rules contained as LP012 inside Trainer(...)
    assert ("built", "") in outcomes
    assert any(outcome == "codes" and "LP012" in codes for outcome, codes in outcomes), outcomes
    result = run_python(
        """
        import json
        from lightning.pytorch.strategies import StrategyRegistry
        print(json.dumps({"fsdp2": type(StrategyRegistry.get("fsdp2")).__name__}))
        """,
        "-W",
        "error",
        env={
            "PYTHONPATH": os.pathsep.join([*map(str, sites), os.environ.get("PYTHONPATH", "")]),
            "LIGHTNING_PRESETS_AUTOLOAD": "1",
            "PYTHONWARNINGS": "error",
        },
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines() == ['{"fsdp2": "ModelParallelStrategy"}']  # plugins' output: stderr
