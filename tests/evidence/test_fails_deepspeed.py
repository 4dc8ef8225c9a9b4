"""DeepSpeed's dependency codes: a broken DeepSpeed and one too old for this torch fail in Lightning's own import and
version checks. The DeepSpeed rules' proofs live with their rules' tests (``tests/strategies/deepspeed/``)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from proof import Proof

from lightning_presets.registry import requirements

pytestmark = [
    pytest.mark.skipif(not requirements.is_importable("deepspeed"), reason="deepspeed is not installed"),
    pytest.mark.usefixtures("process_group"),
]


@pytest.mark.proves("LP401")
def test_lp401_lightning_imports_a_broken_deepspeed(
    proof: Proof, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lightning.pytorch.strategies import DeepSpeedStrategy

    package = tmp_path / "deepspeed"
    package.mkdir()
    (package / "__init__.py").write_text(
        'raise RuntimeError("CUDA_HOME does not exist, unable to compile CUDA op(s)")\n'
    )
    with _shadowed("deepspeed", tmp_path, monkeypatch), proof.raises(RuntimeError, r"CUDA_HOME", code="LP401"):
        DeepSpeedStrategy(stage=2)


@pytest.mark.proves("LP402")
def test_lp402_lightning_refuses_deepspeed_below_0_16_with_this_torch(
    proof: Proof, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lightning.pytorch.strategies import deepspeed as lightning_deepspeed

    if not hasattr(lightning_deepspeed, "_DEEPSPEED_GREATER_EQUAL_0_16"):
        pytest.skip("Lightning 2.5 has no such check: the pair fails when DeepSpeed loads a checkpoint (torch.load)")
    monkeypatch.setattr(lightning_deepspeed, "_DEEPSPEED_GREATER_EQUAL_0_16", False)  # as with deepspeed 0.15.4
    with proof.raises(ImportError, r"PyTorch >= 2.6 requires DeepSpeed >= 0.16.0", code="LP402"):
        lightning_deepspeed.DeepSpeedStrategy(stage=2)


# --- helpers ------------------------------------------------------------------------------------------------------


def _shadowed(name: str, site: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``import name`` finds the package under ``site`` instead of the installed one, inside the block; the modules
    imported before are restored afterwards."""
    from contextlib import contextmanager

    @contextmanager
    def shadow() -> Iterator[None]:
        saved = {key: module for key, module in sys.modules.items() if key == name or key.startswith(f"{name}.")}
        for key in saved:
            monkeypatch.delitem(sys.modules, key)
        monkeypatch.syspath_prepend(str(site))
        try:
            yield
        finally:
            for key in [key for key in sys.modules if key == name or key.startswith(f"{name}.")]:
                del sys.modules[key]
            sys.modules.update(saved)

    return shadow()
