"""``lightning-presets matrix``: coverage, formats, and the committed docs/matrix.* being up to date."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from lightning_presets.cli import main
from lightning_presets.tools import matrix as _matrix

ROOT = Path(__file__).resolve().parents[1]
COMMITTED_MD = ROOT / "docs" / "matrix.md"
COMMITTED_JSON = ROOT / "docs" / "matrix.json"


@pytest.fixture(scope="module")
def computed() -> tuple[list[dict[str, Any]], float]:
    return _matrix.compute()


def test_covers_every_registered_name_topology_and_precision(computed: tuple[list[dict[str, Any]], float]) -> None:
    rows, _ = computed
    for mode in ("trainer", "fabric"):
        names = _matrix.strategies(mode)
        assert {"auto", "fsdp_offload_ckpt", "tp2d_hybrid"} <= set(names)
        mode_rows = [row for row in rows if row["mode"] == mode]
        assert len(mode_rows) == len(names) * len(_matrix.TOPOLOGIES) * len(_matrix.PRECISIONS)
        assert {row["strategy"] for row in mode_rows} == set(names)


def test_verdicts_agree_with_codes(computed: tuple[list[dict[str, Any]], float]) -> None:
    rows, _ = computed
    for row in rows:
        assert row["verdict"] == ("rejected" if row["errors"] else "warning" if row["warnings"] else "valid")
    by_key = {
        (r["mode"], r["strategy"], r["accelerator"], r["devices"], r["num_nodes"], r["precision"]): r for r in rows
    }
    assert "LP101" in by_key[("trainer", "fsdp_offload_ckpt", "cpu", 2, 1, "32-true")]["errors"]
    assert by_key[("trainer", "fsdp_offload_ckpt", "cuda", 8, 4, "bf16-mixed")]["verdict"] == "valid"
    assert "LP700" in by_key[("trainer", "fsdp_offload_ckpt", "cuda", 8, 1, "64-true")]["errors"]  # Lightning's own
    assert by_key[("trainer", "ddp", "cpu", 2, 1, "32-true")]["verdict"] == "valid"
    assert "LP207" in by_key[("fabric", "tp2d_hybrid", "cpu", 2, 1, "32-true")]["errors"]


def test_throughput_is_several_hundred_per_second(computed: tuple[list[dict[str, Any]], float]) -> None:
    rows, seconds = computed
    rate = len(rows) / seconds
    # benchmarks/bench_matrix.py measures properly; this only catches a collapse on a busy machine.
    assert rate > 50, f"{rate:.0f} configurations/s"


def _same_environment() -> bool:
    if not COMMITTED_JSON.exists():
        return False
    return bool(json.loads(COMMITTED_JSON.read_text(encoding="utf-8"))["environment"] == _matrix.environment())


def test_committed_matrix_is_up_to_date(computed: tuple[list[dict[str, Any]], float]) -> None:
    if not _same_environment():
        pytest.skip("docs/matrix.json was generated with other versions or optional packages than installed here")
    rows, _ = computed
    stale = [
        (path, command)
        for path, text, command in (
            (COMMITTED_MD, _matrix.to_markdown(rows), _matrix.COMMANDS["markdown"]),
            (COMMITTED_JSON, _matrix.to_json(rows), _matrix.COMMANDS["json"]),
        )
        if path.read_text(encoding="utf-8") != text
    ]
    assert not stale, "stale: " + "; ".join(f"{path.name} (regenerate: {command})" for path, command in stale)


def test_matrix_command_formats(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lightning_presets.cli import _matrix as _command

    computed: dict[tuple[str, ...], tuple[list[dict[str, Any]], float]] = {}
    compute = _command.compute

    def once(modes: Any, progress: Any = None) -> tuple[list[dict[str, Any]], float]:
        """The first command computes the trainer matrix; the two --check runs compare against the same rows
        (that a second computation gives the same rows is test_committed_matrix_is_up_to_date's claim)."""
        if tuple(modes) not in computed:
            computed[tuple(modes)] = compute(modes, progress)
        return copy.deepcopy(computed[tuple(modes)])

    monkeypatch.setattr(_command, "compute", once)
    out = tmp_path / "trainer.json"
    assert main(["matrix", "--mode", "trainer", "--format", "json", "--output", str(out)]) == 0
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["schema"] == "lightning-presets/matrix"
    assert data["command"] == _matrix.COMMANDS["json"]
    assert {row["mode"] for row in data["configurations"]} == {"trainer"}
    assert "configurations checked in" in capsys.readouterr().err
    assert main(["matrix", "--mode", "trainer", "--format", "json", "--check", str(out)]) == 0
    out.write_text("{}", encoding="utf-8")
    assert main(["matrix", "--mode", "trainer", "--format", "json", "--check", str(out)]) == 1
    assert "stale" in capsys.readouterr().err
    assert list(computed) == [("trainer",)]  # --mode trainer reached the computation, once
