"""``xla_fsdp_ckpt`` on a real torch_xla: the XLA leg of ``.ci/run`` (torch 2.9 and torch_xla 2.9, PJRT on CPU).

Skipped where torch_xla is not installed (the other legs: torch_xla pins its torch release). What it proves and
what it cannot: see ``tests/scripts/xla_fsdp_real.py``.
"""

from __future__ import annotations

import importlib.util
import json
import re

import pytest

from helpers import SCRIPTS, run_python

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torch_xla") is None, reason="needs torch_xla (the XLA leg of .ci/run installs it)"
)


def test_xla_fsdp_ckpt_builds_guards_and_wraps_on_real_torch_xla() -> None:
    result = run_python(
        (SCRIPTS / "xla_fsdp_real.py").read_text(), env={"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "1"}, timeout=300
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (line,) = re.findall(r"^RESULT (.*)$", result.stdout, re.MULTILINE)
    report = json.loads(line)
    assert report["torch_xla"].startswith("2.")
    assert (report["strategy"], report["world_size"], report["accelerator"]) == ("XLAFSDPStrategy", 2, "xla")
    assert (report["precision_plugin"], report["environment"]) == ("XLAPrecision", "XLAEnvironment")
    assert report["rejected"] == {"single_device": ["LP504"], "cpu": ["LP503"]}
    assert report["fsdp_units"] == ["XlaFullyShardedDataParallel"] * 3  # the root and each repeated block
    assert report["checkpoint_policy"] == ["TransformerEncoderLayer"]
    assert report["device"].startswith("xla:")
    assert report["loss_finite"] is True
    assert report["all_grads"] is True


def test_torch_xla_of_this_torch_is_accepted() -> None:
    """The requirement probe (LP501 broken import, LP502 another torch release) passes on a matching pair."""
    result = run_python(
        """
        import lightning_presets
        from lightning_presets.registry import requirements
        probe = requirements.probe("torch_xla")
        strategy = lightning_presets.strategy("xla_fsdp_ckpt", target="fabric")
        print("PROBE", probe.status, type(strategy).__name__)
        """,
        env={"PJRT_DEVICE": "CPU"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(r"^PROBE ok XLAFSDPStrategy$", result.stdout, re.MULTILINE), result.stdout
