"""The user's model for ``plan --model MODULE:FACTORY``: the factory, run safely; the batch; the optimizer.

The factory runs inside the tracer's fake-tensor mode, so building it allocates no real memory. It runs
with an empty stdin and no debugger, and whatever it raises or exits with becomes a :class:`ModelError`
with a message (a factory that aborts the interpreter is contained one level up: the planner runs it in a
child process).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NoReturn

import torch
from torch import nn
from torch.utils._pytree import tree_flatten, tree_map_only


class ModelError(Exception):
    """The model named by ``--model`` cannot be planned; the message says why and what to change."""

    untraceable: bool = False
    """Raised by an operation fake tensors cannot run (a value the shapes alone do not give)."""


class Untraceable(ModelError):
    untraceable = True


def split_spec(spec: str, noun: str = "--model") -> tuple[str, str]:
    """``my_project.models:build`` -> (``my_project.models``, ``build``); a bad form is a :class:`ModelError`."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name.strip() or not attr.strip():
        raise ModelError(f"{noun} {spec!r} is not MODULE:FUNCTION, e.g. my_project.models:build_model")
    return module_name.strip(), attr.strip()


class _Breakpoint(Exception):
    """``breakpoint()`` was called: there is no one to type at the debugger."""


class _Exited(BaseException):
    """``os._exit()`` was called: it would end the process without a word (the check or the plan with it)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def _no_exit(status: int) -> NoReturn:
    raise _Exited(status)


def _no_debugger(*args: Any, **kwargs: Any) -> None:
    raise _Breakpoint


@contextlib.contextmanager
def contained(what: str) -> Iterator[None]:
    """Run user code with an empty stdin and no debugger; anything it raises or exits with becomes a
    :class:`ModelError` of one line."""
    from lightning_presets.tools.simulation.untraceable import untraceable_reason

    stdin, hook, tracer, exit_ = sys.stdin, sys.breakpointhook, sys.gettrace(), os._exit
    sys.stdin = io.StringIO("")
    sys.breakpointhook = _no_debugger
    os._exit = _no_exit
    try:
        yield
    except ModelError:
        raise
    except KeyboardInterrupt:
        raise
    except _Breakpoint:
        raise ModelError(f"{what} called breakpoint(); a factory must run without a debugger") from None
    except SystemExit as error:
        raise ModelError(f"{what} called sys.exit({error.code!r}); a factory must return the model") from None
    except _Exited as error:
        raise ModelError(f"{what} called os._exit({error.code!r}); a factory must return the model") from None
    except EOFError as error:
        raise ModelError(f"{what} read from stdin ({error or 'EOFError'}); a factory must not ask for input, "
                         "pass its settings as defaults") from None  # fmt: skip
    except BaseException as error:  # the user's code may raise anything: report it, never a traceback
        reason = untraceable_reason(error)
        if reason:
            raise Untraceable(f"{what} cannot run under fake tensors (shapes, no values): {reason}") from None
        text = str(error).strip().splitlines()
        raise ModelError(f"{what} raised {type(error).__name__}" + (f": {text[0]}" if text else "")) from None
    finally:
        sys.stdin, sys.breakpointhook, os._exit = stdin, hook, exit_
        sys.settrace(tracer)  # a debugger the user's code started (pdb.set_trace()) ends with it


def load_factory(spec: str, noun: str = "--model") -> Callable[[], Any]:
    """Import ``MODULE`` and look up ``FACTORY`` (dots allowed: ``models:Decoder.small``)."""
    module_name, attr = split_spec(spec, noun)
    with contained(f"importing {module_name!r}"):
        try:
            target: Any = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if error.name and module_name.startswith(error.name):
                raise ModelError(f"{noun} {spec}: no module named {module_name!r} (run from the directory that "
                                 "holds it, or install it)") from None  # fmt: skip
            raise
    for part in attr.split("."):
        if not hasattr(target, part):
            raise ModelError(f"{noun} {spec}: {type(target).__name__} {getattr(target, '__name__', '')!r} has no "
                             f"attribute {part!r}")  # fmt: skip
        target = getattr(target, part)
    if isinstance(target, nn.Module):
        raise ModelError(f"{noun} {spec} is a module instance, already built with real memory; name the function "
                         "or class that builds it, so it can be built under fake tensors once per preset")  # fmt: skip
    if not callable(target):
        raise ModelError(f"{noun} {spec} is a {type(target).__name__}, not a function or class")
    return target  # type: ignore[no-any-return]  # a callable of the user's; checked above


def build(factory: Callable[[], Any], spec: str) -> nn.Module:
    """Call the factory (the caller holds the fake-tensor mode) and check it returned an ``nn.Module``.

    Under fake tensors a weight has a shape and no value, so an initialiser that reads values (``trunc_normal_``
    tests ``mask.any()``) cannot run: the factory is then called again with ``torch.nn.init``'s initialisers
    leaving the weights as they are, which changes no shape, dtype or device of what it builds."""
    try:
        with contained(f"the factory {spec}"):
            model = factory()
    except Untraceable:
        with contained(f"the factory {spec}"), _initialisers_skipped():
            model = factory()
    if not isinstance(model, nn.Module):
        raise ModelError(f"the factory {spec} returned a {type(model).__name__}, not a LightningModule or nn.Module")
    return model


@contextlib.contextmanager
def _initialisers_skipped() -> Iterator[None]:
    """``torch.nn.init``'s in-place initialisers (``normal_``, ``trunc_normal_``, ``kaiming_uniform_``...) return
    their tensor untouched for the duration."""
    from unittest import mock

    def untouched(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        return tensor

    public = [name for name in vars(nn.init) if name.endswith("_") and not name.startswith("_")]
    # the writers they call, looked up at call time: a library that kept the public functions at import
    # (transformers' TORCH_INIT_FUNCTIONS) reaches them only here
    writers = ["_no_grad_uniform_", "_no_grad_normal_", "_no_grad_trunc_normal_", "_no_grad_fill_", "_no_grad_zero_"]
    names = [name for name in (*public, *writers) if callable(getattr(nn.init, name, None))]
    with contextlib.ExitStack() as stack:
        for name in names:
            stack.enter_context(mock.patch.object(nn.init, name, untouched))
        yield


@dataclass(frozen=True, slots=True)
class Batch:
    """One batch as the dataloader yields it: ``training_step``'s argument (and ``forward``'s input)."""

    value: Any
    source: str
    """Where it came from, for messages: ``example_input_array`` or ``--batch MODULE:FUNCTION``."""


def batch(model: nn.Module, spec: str, batch_size: int | None = None, given: str | None = None) -> Batch:
    """The batch of the step: what ``--batch MODULE:FUNCTION`` returns (called here, under the caller's fake
    mode), else the module's ``example_input_array``; the batch dimension set to ``batch_size`` when given."""
    if given is not None:
        source = f"--batch {given}"
        function = load_factory(given, noun="--batch")
        with contained(f"the batch function {given}"):
            value = function()
        if not any(isinstance(leaf, torch.Tensor) for leaf in tree_flatten(value)[0]):
            raise ModelError(f"{source} returned a {type(value).__name__} with no tensor in it; return one batch as "
                             "your dataloader yields it")  # fmt: skip
    else:
        source, value = "example_input_array", getattr(model, "example_input_array", None)
        if value is None:
            raise ModelError(f"{spec}: {type(model).__name__} has no example_input_array; set one in __init__ "
                             "(Lightning's convention), e.g. self.example_input_array = torch.zeros(8, 2048, "
                             "dtype=torch.long), or give a batch with --batch MODULE:FUNCTION")  # fmt: skip
    if batch_size is not None:
        value = with_batch(value, batch_size, source)
    return Batch(value, source)


def as_arguments(value: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A batch as ``forward``'s (args, kwargs), as Lightning passes ``example_input_array``."""
    if isinstance(value, dict):
        return (), dict(value)
    if isinstance(value, (tuple, list)):
        return tuple(value), {}
    return (value,), {}


def batch_of(example: Any) -> int | None:
    """The common leading dimension of the tensors in an example input, ``None`` if they do not share one."""
    sizes = {leaf.shape[0] for leaf in tree_flatten(example)[0] if isinstance(leaf, torch.Tensor) and leaf.dim()}
    return sizes.pop() if len(sizes) == 1 else None


def with_batch(example: Any, batch_size: int, source: str) -> Any:
    if batch_of(example) is None:
        raise ModelError(f"the tensors of {source} share no leading (batch) dimension, so --batch-size cannot "
                         f"resize them; set the batch size in {source} instead")  # fmt: skip
    return tree_map_only(torch.Tensor, lambda t: t.new_zeros((batch_size, *t.shape[1:])) if t.dim() else t, example)


def optimizers(model: nn.Module, spec: str, default: str) -> list[torch.optim.Optimizer]:
    """The optimizers of ``configure_optimizers`` (every form Lightning accepts), else ``default`` (adamw or sgd)."""
    configure = getattr(model, "configure_optimizers", None)
    if configure is None:
        parameters = [p for p in model.parameters() if p.requires_grad]
        if default == "sgd":
            return [torch.optim.SGD(parameters, lr=1e-3, momentum=0.9)]
        return [torch.optim.AdamW(parameters, lr=1e-3)]
    with contained(f"{spec}: configure_optimizers()"):
        config = configure()
    found = [each for each in tree_flatten(_optimizer_leaves(config))[0] if isinstance(each, torch.optim.Optimizer)]
    if not found:
        raise ModelError(f"{spec}: configure_optimizers() returned no torch.optim.Optimizer "
                         f"(got {type(config).__name__})")  # fmt: skip
    return list(dict.fromkeys(found))


def _optimizer_leaves(config: Any) -> Any:
    """Keep the optimizers of Lightning's forms: an optimizer, lists, (optimizers, schedulers), dicts."""
    if isinstance(config, dict):
        return config.get("optimizer")
    if isinstance(config, (list, tuple)):
        return [_optimizer_leaves(each) for each in config]
    return config
