"""Where the supported Lightning releases (2.5 and 2.6) differ for this package, in one place.

Each difference is read from Lightning itself (a signature, an attribute, a function that exists or not), never
from a version number, so a patch release that backports a change is handled the way it behaves. Every item has
a compatibility test that CI runs on each Lightning release it installs (``.ci/run``).

What differs (checked in the 2.5.0–2.5.6 and 2.6.6 wheels):

- **Fabric ``setup_module_and_optimizers``** takes ``(module, optimizers)`` and returns two values in 2.5; 2.6 adds
  ``scheduler=None`` and returns three. A hook that overrides it forwards what Lightning's method takes
  (:func:`setup_module_and_optimizers`).
- **FSDP precision ``module_init_context``** creates modules in ``mixed_precision_config.param_dtype`` in 2.5, in
  the dtype inputs are converted to in 2.6. For a plugin with bf16 parameters under ``bf16-mixed``, 2.5 would
  create the model, hence FSDP's sharded master weights and the optimizer state, in bf16
  (:func:`fsdp_module_init_context` gives 2.6's behaviour on both).
- **DDP with ``static_graph=True`` and manual optimization**: Lightning 2.5 never all-reduces the gradients
  (Lightning issue #18086; reproduced on CPU with 2 processes by the compatibility tests), 2.6 flushes the first
  backward in ``DDPStrategy.post_backward`` (PR #21251). :func:`flush_static_graph_first_backward` does that flush
  on releases whose strategy does not.
- **Connector order**: 2.5.0–2.5.5 call ``_register_external_accelerators_and_strategies()`` at the start of the
  Trainer's ``_AcceleratorConnector.__init__`` (it registers lightning-habana's ``hpu_parallel``/``hpu_single``
  when that package is installed, only if the names are free); 2.5.6 and 2.6 register nothing there. Presets are
  registered when the strategies module is imported, before any connector runs, so a preset never takes a name
  away from Lightning's own: :func:`connector_registers_strategies` says whether this release may add names later.
- **Same in both** (pinned by tests on each release): the registry (a ``dict`` of ``{"strategy", "init_params",
  "description", "strategy_name"}`` entries), the single ``_configure_launcher()`` call that ends
  ``_lazy_init_strategy`` (where the guards run), and ``ModelParallelStrategy``'s arguments (Fabric's
  ``parallelize_fn`` first, then ``data_parallel_size``, ``tensor_parallel_size``, ...).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from lightning_presets.registry import private

HABANA_STRATEGY_NAMES = ("hpu_parallel", "hpu_single")
"""The names Lightning 2.5.0–2.5.5's Trainer connector registers when lightning-habana is installed."""
_TRAINER_CONNECTOR = "accelerator_connector"


def takes_scheduler(method: Callable[..., Any]) -> bool:
    """Whether a Fabric strategy's ``setup_module_and_optimizers`` takes a ``scheduler`` (Lightning 2.6)."""
    return "scheduler" in inspect.signature(method).parameters


def setup_module_and_optimizers(method: Callable[..., Any], module: Any, optimizers: list[Any], scheduler: Any) -> Any:
    """Call Lightning's ``setup_module_and_optimizers`` with the arguments it takes; return what it returns.

    Lightning 2.5's Fabric calls the hook with ``(module, optimizers)`` and unpacks two values; 2.6's passes
    ``scheduler`` and unpacks three. A scheduler reaches this only from 2.6's Fabric, which also takes it.
    """
    if takes_scheduler(method):
        return method(module, optimizers, scheduler)
    return method(module, optimizers)


def fsdp_module_init_context(plugin: Any) -> AbstractContextManager[Any]:
    """The context modules are created in, for an FSDP precision plugin: Lightning 2.6's on every release.

    Lightning 2.6 creates them in the plugin's input dtype (``tensor_init_context``: fp32 under ``bf16-mixed``);
    2.5 in ``mixed_precision_config.param_dtype``, which a plugin with bf16 parameters sets to bf16.
    """
    return plugin.tensor_init_context()  # type: ignore[no-any-return]  # Lightning's plugin API is untyped here


def lightning_flushes_static_graph(strategy: Any) -> bool:
    """Whether Lightning's own ``DDPStrategy`` all-reduces a static graph's first manual backward (2.6 keeps the
    ``_pl_static_graph_delay_done`` flag for it; 2.5 has neither the flag nor the flush)."""
    return private.flushes_static_graph(strategy)


def flush_static_graph_first_backward(strategy: Any) -> bool:
    """After the first backward of manual optimization with ``DDP(static_graph=True)``, launch the all-reduce
    DDP delays in a static graph's first iteration, once, where Lightning does not. Returns whether it did.

    DDP records a static graph during the first backward and defers its all-reduce to a callback that Lightning's
    manual-optimization path never triggers; without this every rank keeps its own gradients.
    """
    if lightning_flushes_static_graph(strategy) or strategy.__dict__.get("_lp_static_graph_flushed", False):
        return False
    from torch.nn.parallel import DistributedDataParallel

    model = getattr(strategy, "model", None)
    module = getattr(strategy, "lightning_module", None)
    if not isinstance(model, DistributedDataParallel) or module is None or module.automatic_optimization:
        return False
    if not getattr(model, "static_graph", False):
        return False
    reducer: Any = model.reducer  # torch types the Reducer without its private methods
    reducer._delay_all_reduce()
    strategy.__dict__["_lp_static_graph_flushed"] = True
    return True


def connector_registers_strategies(package: str = "lightning.pytorch") -> bool:
    """Whether this release's Trainer connector registers strategies itself while a Trainer is built (2.5.0–2.5.5:
    lightning-habana's ``hpu_parallel``/``hpu_single``, if installed and if the names are free)."""
    module = importlib.import_module(f"{package}.trainer.connectors.{_TRAINER_CONNECTOR}")
    return hasattr(module, private.EXTERNAL_REGISTRATION)
