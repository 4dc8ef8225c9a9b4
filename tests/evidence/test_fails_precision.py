"""The precision presets' dependency codes: Transformer Engine must import and be recent enough (LP601, LP602). The
precision rules' proofs live with their rules' tests (``tests/guards/test_precision_rules.py``,
``tests/plugins/test_presets.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from proof import Proof
from test_fails_xla import broken_package, fresh_requirement

pytestmark = pytest.mark.usefixtures("process_group")


@pytest.mark.proves("LP601", "LP602")
def test_lp601_lp602_transformer_engine_must_import_and_be_recent(
    proof: Proof, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lightning.fabric.plugins.precision import transformer_engine

    cases = (("1.12.0", "LP601", ImportError, r"undefined symbol"),  # installed and recent, but broken
             ("0.10.0", "LP602", ModuleNotFoundError, r"transformer.engine>=0\.11\.0"))  # fmt: skip
    for version, code, error, match in cases:
        site = tmp_path / version
        broken_package(site, "transformer_engine", version, "libtransformer_engine.so: undefined symbol")
        monkeypatch.syspath_prepend(str(site))
        monkeypatch.delitem(sys.modules, "transformer_engine", raising=False)
        fresh_requirement(transformer_engine, "_TRANSFORMER_ENGINE_AVAILABLE", monkeypatch)
        with proof.raises(error, match, code=code):
            transformer_engine.TransformerEnginePrecision(weights_dtype=__import__("torch").bfloat16)
