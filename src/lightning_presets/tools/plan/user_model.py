"""The user's model for ``plan --model MODULE:FACTORY``: the factory, run safely; the example input; the optimizer.

The factory runs inside the tracer's fake-tensor mode, so building it allocates no real memory. It runs
with an empty stdin, and whatever it raises or exits with becomes a :class:`ModelError` with a message
(a factory that aborts the interpreter is contained one level up: the planner runs it in a child process).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_flatten, tree_map_only


class ModelError(Exception):
    """The model named by ``--model`` cannot be planned; the message says why and what to change."""


def split_spec(spec: str) -> tuple[str, str]:
    """``my_project.models:build`` -> (``my_project.models``, ``build``); a bad form is a :class:`ModelError`."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name.strip() or not attr.strip():
        raise ModelError(f"--model {spec!r} is not MODULE:FACTORY, e.g. my_project.models:build_model")
    return module_name.strip(), attr.strip()


@contextlib.contextmanager
def contained(what: str) -> Iterator[None]:
    """Run user code with an empty stdin; anything it raises or exits with becomes a :class:`ModelError`."""
    stdin = sys.stdin
    sys.stdin = io.StringIO("")
    try:
        yield
    except ModelError:
        raise
    except KeyboardInterrupt:
        raise
    except SystemExit as error:
        raise ModelError(f"{what} called sys.exit({error.code!r}); a factory must return the model") from None
    except EOFError as error:
        raise ModelError(f"{what} read from stdin ({error or 'EOFError'}); a factory must not ask for input, "
                         "pass its settings as defaults") from None  # fmt: skip
    except BaseException as error:  # the user's code may raise anything: report it, never a traceback
        text = str(error).strip().splitlines()
        raise ModelError(f"{what} raised {type(error).__name__}" + (f": {text[0]}" if text else "")) from None
    finally:
        sys.stdin = stdin


def load_factory(spec: str) -> Callable[[], Any]:
    """Import ``MODULE`` and look up ``FACTORY`` (dots allowed: ``models:Decoder.small``)."""
    module_name, attr = split_spec(spec)
    with contained(f"importing {module_name!r}"):
        try:
            target: Any = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if error.name and module_name.startswith(error.name):
                raise ModelError(f"--model {spec}: no module named {module_name!r} (run from the directory that "
                                 "holds it, or install it)") from None  # fmt: skip
            raise
    for part in attr.split("."):
        if not hasattr(target, part):
            raise ModelError(f"--model {spec}: {type(target).__name__} {getattr(target, '__name__', '')!r} has no "
                             f"attribute {part!r}")  # fmt: skip
        target = getattr(target, part)
    if isinstance(target, nn.Module):
        raise ModelError(f"--model {spec} is a module instance, already built with real memory; name the function "
                         "or class that builds it, so it can be built under fake tensors once per preset")  # fmt: skip
    if not callable(target):
        raise ModelError(f"--model {spec} is a {type(target).__name__}, not a factory (a function or class)")
    return target  # type: ignore[no-any-return]  # a callable of the user's; checked above


def build(factory: Callable[[], Any], spec: str) -> nn.Module:
    """Call the factory (the caller holds the fake-tensor mode) and check it returned an ``nn.Module``."""
    with contained(f"the factory {spec}"):
        model = factory()
    if not isinstance(model, nn.Module):
        raise ModelError(f"the factory {spec} returned a {type(model).__name__}, not a LightningModule or nn.Module")
    return model


def example_input(model: nn.Module, spec: str, batch_size: int | None = None) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The module's ``example_input_array`` as (args, kwargs), Lightning's convention; the batch dimension set
    to ``batch_size`` when given."""
    example = getattr(model, "example_input_array", None)
    if example is None:
        raise ModelError(f"{spec}: {type(model).__name__} has no example_input_array; set one in __init__ "
                         "(Lightning's convention), e.g. self.example_input_array = torch.zeros(8, 2048, "
                         "dtype=torch.long)")  # fmt: skip
    if batch_size is not None:
        example = with_batch(example, batch_size, spec)
    if isinstance(example, dict):
        return (), dict(example)
    if isinstance(example, (tuple, list)):
        return tuple(example), {}
    return (example,), {}


def batch_of(example: Any) -> int | None:
    """The common leading dimension of the tensors in an example input, ``None`` if they do not share one."""
    sizes = {leaf.shape[0] for leaf in tree_flatten(example)[0] if isinstance(leaf, torch.Tensor) and leaf.dim()}
    return sizes.pop() if len(sizes) == 1 else None


def with_batch(example: Any, batch_size: int, spec: str) -> Any:
    if batch_of(example) is None:
        raise ModelError(f"{spec}: the tensors of example_input_array share no leading (batch) dimension, so "
                         "--batch-size cannot resize them; set the batch in example_input_array instead")  # fmt: skip
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
