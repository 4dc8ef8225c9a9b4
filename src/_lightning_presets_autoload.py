"""Start-up hook of lightning-presets, loaded by ``lightning_presets_autoload.pth``.

It runs at every interpreter start, so it imports nothing: it only puts a small finder on
``sys.meta_path``. When one of Lightning's four strategies modules is imported, the finder
lets the real loader run and then registers the presets into that module's registry; if the
module's package (``lightning.fabric``, ...) is still initializing, registration waits until the
package is complete, so preset modules that import Lightning never meet a half-initialized one.
Switch it off with ``LIGHTNING_PRESETS_AUTOLOAD=0``.

PYTEST_DONT_REWRITE: the distribution's pytest plugin makes pytest mark its top-level modules for assertion
rewriting, and this one is imported at start-up, long before pytest could rewrite it.
"""

import sys

# Annotations only: ``types``/``importlib`` are never imported at start-up (mypy reads this name as typing's).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from importlib.abc import Loader
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any

# Keep in sync with lightning_presets.core.namespaces.NAMESPACES (a test checks it).
STRATEGY_MODULES = frozenset(
    {
        "lightning.pytorch.strategies",
        "lightning.fabric.strategies",
        "pytorch_lightning.strategies",
        "lightning_fabric.strategies",
    }
)
PACKAGES = frozenset(name.rpartition(".")[0] for name in STRATEGY_MODULES)
_initializing: set[str] = set()  # packages of PACKAGES whose ``__init__`` is running


def _register(module: "ModuleType") -> None:
    """Register into ``module``; whatever goes wrong is reported, never raised into ``import lightning``.

    Everything but ``KeyboardInterrupt`` is contained (``SystemExit`` from a preset module's argparse call
    included), and the report cannot raise either: under ``-W error`` it is written to stderr instead.
    """
    try:
        from lightning_presets._activate import register_module

        register_module(module)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # a broken preset must never break `import lightning`
        text = (
            f"lightning-presets could not register its presets into {module.__name__}: "
            f"{_error_text(exc)}. Run `lightning-presets list` to see which preset is broken."
        )
        try:
            import warnings

            warnings.warn(text, RuntimeWarning, stacklevel=2)
        except Exception:  # a filter made the warning an error: say it on stderr instead
            if sys.stderr is not None:
                sys.stderr.write(f"RuntimeWarning: {text}\n")


def _error_text(exc: BaseException) -> str:
    try:
        return f"{type(exc).__name__}: {exc}"
    except Exception:  # an exception whose __str__ raises: its type must do
        return type(exc).__name__


class _RegisteringLoader:
    """Runs the real loader, then registers the presets into the fresh module."""

    def __init__(self, loader: "Loader") -> None:
        self._loader = loader

    def create_module(self, spec: "ModuleSpec") -> "ModuleType | None":
        return self._loader.create_module(spec)

    def exec_module(self, module: "ModuleType") -> None:
        name = module.__name__
        if name not in PACKAGES:
            self._loader.exec_module(module)
            if name.rpartition(".")[0] not in _initializing:
                _register(module)
            return
        _initializing.add(name)
        try:
            self._loader.exec_module(module)
        finally:
            _initializing.discard(name)
        strategies = sys.modules.get(name + ".strategies")
        if strategies is not None:
            _register(strategies)

    def __getattr__(self, name: str) -> "Any":
        return getattr(self._loader, name)


class StrategiesFinder:
    """A meta-path finder that answers only for Lightning's strategies modules and their packages.

    It asks the finders after it and wraps the loader they give, so it must come first: a finder put ahead of it
    later (an instrumenting import hook such as typeguard's) would load Lightning past it. Any import that reaches
    it while another finder is ahead moves it back to the front (it still asks that finder, and uses its loader).
    """

    lightning_presets_finder = True
    """Marks every copy of this finder (a reloaded hook module makes another class): copies never swap places."""

    def find_spec(self, fullname: str, path: "Any" = None, target: "Any" = None) -> "ModuleSpec | None":
        meta_path = sys.meta_path
        if meta_path and not getattr(meta_path[0], "lightning_presets_finder", False):
            # One slice assignment: an import iterating the list meanwhile sees every other finder once.
            meta_path[:] = [self, *(finder for finder in meta_path if finder is not self)]
        if fullname not in STRATEGY_MODULES and fullname not in PACKAGES:
            return None
        for finder in sys.meta_path:
            if finder is self or isinstance(finder, StrategiesFinder):
                continue
            find_spec = getattr(finder, "find_spec", None)
            if find_spec is None:
                continue
            spec: ModuleSpec | None = find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            # A duck-typed Loader: subclassing importlib.abc.Loader would import importlib.abc at start-up.
            spec.loader = _RegisteringLoader(spec.loader)  # type: ignore[assignment]  # duck-typed: see above
        return spec

    def invalidate_caches(self) -> None:
        pass


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once) and register into modules already imported."""
    if not any(isinstance(finder, StrategiesFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, StrategiesFinder())
    for name in STRATEGY_MODULES:
        module = sys.modules.get(name)
        if module is not None and name.rpartition(".")[0] not in _initializing:
            _register(module)
