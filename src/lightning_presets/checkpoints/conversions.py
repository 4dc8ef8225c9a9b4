"""Conversions as values: the steps that make a checkpoint loadable, with its real paths.

A :class:`Conversion` is a tuple of steps (a :class:`Command` line or a line of :class:`Python`) and the checkpoint
they write. The resume rules' hints show it through :func:`render`; the resume matrix benchmark runs the same
object's steps through :func:`command_line`, so what a hint says is what was run.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
from dataclasses import dataclass

from lightning_presets.checkpoints import CheckpointFacts


@dataclass(frozen=True, slots=True)
class Command:
    """A command line, ``python -m MODULE ARGUMENT...``: ``argv[0]`` stands for the job's Python interpreter."""

    argv: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Python:
    """Python statements on one line (``python -c`` runs them)."""

    code: str


Step = Command | Python


@dataclass(frozen=True, slots=True, kw_only=True)
class Conversion:
    """What makes a checkpoint loadable: the steps, in order, and the checkpoint the job loads after them."""

    steps: tuple[Step, ...]
    """Empty when there is nothing to run (the checkpoint is one file already, or converted already)."""
    result: str
    """The checkpoint the job loads after the steps (the original one when there is nothing to run)."""
    key: str | None = None
    """Where ``result`` keeps the model's weights (``None``: at its top level, or not a weights file)."""
    resumes: bool = False
    """The job resumes from ``result`` with nothing else changed (``fit(ckpt_path=result)``,
    ``fabric.load(result, state)``); otherwise it loads only the weights, or needs a setting changed first."""

    def resuming(self) -> Conversion:
        """The same conversion, the job then resuming from its result."""
        return dataclasses.replace(self, resumes=True)

    def then(self, *steps: Step) -> Conversion:
        """The same conversion with ``steps`` run after its own."""
        return dataclasses.replace(self, steps=(*self.steps, *steps))


def render(conversion: Conversion) -> str:
    """The steps as a hint shows them: each command or line of Python in backquotes, joined by ``, then``."""
    return ", then ".join(
        f"`{shlex.join(step.argv)}`" if isinstance(step, Command) else f"in Python: `{step.code}`"
        for step in conversion.steps
    )


def command_line(step: Step, python: str) -> list[str]:
    """The argument vector that runs ``step`` with the interpreter ``python``."""
    if isinstance(step, Command):
        return [python, *step.argv[1:]]
    return [python, "-c", step.code]


def _module(module: str, *arguments: str) -> Command:
    return Command(("python", "-m", module, *arguments))


def consolidated_path(facts: CheckpointFacts) -> str:
    """Where a consolidation writes the one file: beside the checkpoint, ``.consolidated`` appended."""
    return facts.path.rstrip("/" + os.sep) + ".consolidated"


def to_one_file(facts: CheckpointFacts) -> Conversion:
    """The steps that turn ``facts`` into one file, with its real paths (none for a file already)."""
    out = consolidated_path(facts)
    if facts.format == "file":
        return Conversion(steps=(), result=facts.path, key=facts.model_key)
    if facts.format == "deepspeed" or facts.writer == "trainer":  # lightning-presets convert, verified
        key = "state_dict" if facts.writer == "trainer" else None
        return Conversion(steps=(_module("lightning_presets", "convert", facts.path, out),), result=out, key=key)
    arguments = (facts.path, "--output_file", out)
    if facts.writer == "fabric":
        consolidate = _module("lightning.fabric.utilities.consolidate_checkpoint", *arguments)
        return Conversion(steps=(consolidate,), result=out, key=facts.model_key)
    code = (
        "from torch.distributed.checkpoint.format_utils import dcp_to_torch_save; "
        f"dcp_to_torch_save({facts.path!r}, {out!r})"
    )
    return Conversion(steps=(Python(code),), result=out, key=facts.model_key)


def integer_keys(facts: CheckpointFacts, path: str) -> Python:
    """The line of Python that turns a consolidated optimizer state's text keys (``'0'``) back into parameter
    indices."""
    fixed = "{**o, 'state': {int(k): v for k, v in o['state'].items()}}"
    if facts.writer == "trainer":  # consolidated into the Trainer's list
        change = f"c['optimizer_states'] = [{fixed} for o in c['optimizer_states']]"
    else:
        change = f"c.update({{k: (lambda o: {fixed})(c[k]) for k in {facts.optimizer_entries!r}}})"
    return Python(f"import torch; c = torch.load({path!r}, weights_only=False); {change}; torch.save(c, {path!r})")


def deepspeed_root(facts: CheckpointFacts) -> tuple[str, str]:
    """(the folder that holds DeepSpeed's ``latest`` file, the tag) of a DeepSpeed checkpoint."""
    tag = facts.tag or os.path.basename(facts.path.rstrip("/" + os.sep))
    root = facts.path if facts.tag else os.path.dirname(facts.path.rstrip("/" + os.sep)) or "."
    return root, tag


def universal_path(facts: CheckpointFacts) -> str:
    """Where the universal conversion writes its checkpoint: beside the checkpoint's folder, ``.universal``
    appended."""
    root, _ = deepspeed_root(facts)
    return root.rstrip("/" + os.sep) + ".universal"


def to_universal(facts: CheckpointFacts) -> Conversion:
    """``lightning-presets convert --to universal``: DeepSpeed's ``ds_to_universal`` on a copy of the checkpoint
    (verified; the source is not written to), then the job loads the result with ``checkpoint.load_universal`` set.
    Nothing to run when the checkpoint has a universal copy already (the job loads the checkpoint itself)."""
    root, _ = deepspeed_root(facts)
    if facts.universal:
        return Conversion(steps=(), result=root)
    out = universal_path(facts)
    return Conversion(steps=(_module("lightning_presets", "convert", root, out, "--to", "universal"),), result=out)
