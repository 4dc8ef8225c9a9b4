"""A DeepSpeed ZeRO checkpoint made loadable at another data-parallel size: DeepSpeed's own ``ds_to_universal``,
run on a copy, so that the source is never written to.

``ds_to_universal`` writes the universal copy of a tag folder beside it (``<tag>_universal``) and the file
``latest_universal`` into the folder above; DeepSpeed's engine reads them when its config sets
``checkpoint.load_universal``. Run on the source, it would add both to the user's checkpoint; run here, the result
is a new checkpoint folder: the source's ``latest`` and tag folder copied, and the universal copy beside them.
It runs on the CPU (DeepSpeed's CPU accelerator): ``--inject_missing_state`` supplies the
``universal_checkpoint_info`` that Megatron-DeepSpeed writes and a plain engine (Lightning's included) does not.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from lightning_presets.checkpoints import CheckpointFacts

TIMEOUT_S = 3600.0


def command(tag_folder: Path, output: Path) -> list[str]:
    """DeepSpeed's converter, as a command line run by this interpreter."""
    return [
        sys.executable, "-m", "deepspeed.checkpoint.ds_to_universal", "--input_folder", str(tag_folder),
        "--output_folder", str(output), "--inject_missing_state", "--num_extract_workers", "1",
        "--num_merge_workers", "1",
    ]  # fmt: skip


def write(facts: CheckpointFacts, root: Path, tag: str, staging: Path) -> str:
    """Copy the checkpoint ``root`` (its ``latest`` and the tag folder) into ``staging`` and run ``ds_to_universal``
    there; returns the universal tag. Raises ``RuntimeError`` with DeepSpeed's last lines when it fails."""
    staging.mkdir()
    shutil.copy2(root / "latest", staging / "latest")
    shutil.copytree(root / tag, staging / tag)
    universal = f"{tag}_universal"
    environment = {**os.environ, "PYTHONWARNINGS": "ignore"}
    result = subprocess.run(
        command(staging / tag, staging / universal), capture_output=True, text=True, check=False,
        timeout=TIMEOUT_S, env=environment,
    )  # fmt: skip
    if result.returncode != 0 or not (staging / "latest_universal").is_file():
        tail = " | ".join((result.stderr or result.stdout).strip().splitlines()[-3:])[-600:]
        raise RuntimeError(f"DeepSpeed's ds_to_universal failed (exit {result.returncode}): {tail}")
    return universal


def weights(folder: Path, universal: str) -> dict[str, Any]:
    """The fp32 weights of a universal tag folder, read back from its files (``zero/<name>/fp32.pt``)."""
    import torch

    found = {}
    for each in sorted(path for path in (folder / universal / "zero").iterdir() if path.is_dir()):
        held = torch.load(each / "fp32.pt", map_location="cpu", weights_only=False)
        found[each.name] = held["param"] if isinstance(held, dict) else held
    return found
