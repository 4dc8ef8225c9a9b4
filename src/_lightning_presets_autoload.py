"""Start-up hook of lightning-presets, loaded by ``lightning_presets_autoload.pth``.

It runs at every interpreter start, so it imports nothing: it only puts a small finder on
``sys.meta_path``. When one of Lightning's four strategies modules is imported, the finder
lets the real loader run and then registers the presets into that module's registry.
Switch it off with ``LIGHTNING_PRESETS_AUTOLOAD=0``.
"""

import sys

# Keep in sync with lightning_presets._namespaces.NAMESPACES (a test checks it).
STRATEGY_MODULES = frozenset(
    {
        "lightning.pytorch.strategies",
        "lightning.fabric.strategies",
        "pytorch_lightning.strategies",
        "lightning_fabric.strategies",
    }
)


def _register(module):
    try:
        from lightning_presets._bridge import register_module

        register_module(module)
    except Exception as exc:  # a broken preset must never break `import lightning`
        import warnings

        warnings.warn(
            f"lightning-presets could not register its presets into {module.__name__}: "
            f"{type(exc).__name__}: {exc}. Run `lightning-presets list` to see which preset is broken.",
            RuntimeWarning,
            stacklevel=2,
        )


class _RegisteringLoader:
    """Runs the real loader, then registers the presets into the fresh module."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        _register(module)

    def __getattr__(self, name):
        return getattr(self._loader, name)


class StrategiesFinder:
    """A meta-path finder that answers only for Lightning's strategies modules."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in STRATEGY_MODULES:
            return None
        for finder in sys.meta_path:
            if finder is self or isinstance(finder, StrategiesFinder):
                continue
            find_spec = getattr(finder, "find_spec", None)
            if find_spec is None:
                continue
            spec = find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _RegisteringLoader(spec.loader)
        return spec

    def invalidate_caches(self):
        pass


def install():
    """Put the finder first on ``sys.meta_path`` (once) and register into modules already imported."""
    if not any(isinstance(finder, StrategiesFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, StrategiesFinder())
    for name in STRATEGY_MODULES:
        module = sys.modules.get(name)
        if module is not None:
            _register(module)
