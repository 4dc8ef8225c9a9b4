"""``check --set`` on a preset (issue 27): the strategy constructor's own refusal is LP700 (exit 1), as for Lightning's
strategies, never an internal error; an unhashable literal is a plain string; a bug of ours stays an internal error."""

from __future__ import annotations

import pytest

from helpers import run_cli
from lightning_presets.tools.check import engine

DEEPSPEED = ("check", "--strategy", "deepspeed_zero2_offload", "--accelerator", "cuda", "--gpus", "8", "--devices", "8")


@pytest.mark.parametrize(
    ("setting", "message"),
    [("config=/no/such/ds_config.json", "the path does not exist: /no/such/ds_config.json"),
     ("config={bad json", "the path does not exist: {bad json"),
     ("logging_level=NOPE", "Unknown level: 'NOPE'")],
    ids=["missing-config", "bad-json", "logging-level"],
)  # fmt: skip
def test_the_presets_constructor_refusing_a_setting_is_lp700(
    capsys: pytest.CaptureFixture[str], setting: str, message: str
) -> None:
    pytest.importorskip("deepspeed")
    code, out, err = run_cli(capsys, *DEEPSPEED, "--set", setting)
    assert code == 1, out + err
    assert "[LP700]" in out
    assert message in out
    assert "internal error" not in out + err
    # plain Lightning's strategy says the same
    code, out, _ = run_cli(capsys, *DEEPSPEED[:2], "deepspeed", *DEEPSPEED[3:], "--set", setting)
    assert code == 1
    assert "[LP700]" in out


def test_its_accepted_neighbour_is_valid(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("deepspeed")
    code, out, err = run_cli(capsys, *DEEPSPEED, "--set", "logging_level=30")
    assert code == 0, out + err


def test_an_unhashable_literal_is_a_string(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "check", "--strategy", "fsdp2", "--accelerator", "cpu", "--devices", "2",
                             "--set", "mesh={[1]}")  # fmt: skip
    assert code == 1, out + err
    assert "[LP006]" in out  # not an argument of the preset: the value was read, as a string
    assert "internal error" not in out + err


def test_a_failure_in_our_own_code_is_still_an_internal_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    namespace: dict[str, object] = {}
    exec(compile("def strategy(*args, **kwargs):\n    raise RuntimeError('a bug of ours')\n", engine.__file__, "exec"),
         namespace)  # fmt: skip
    monkeypatch.setattr(engine._api, "strategy", namespace["strategy"])
    code, _, err = run_cli(capsys, "check", "--strategy", "fsdp2", "--accelerator", "cpu", "--devices", "2",
                             "--set", "reshard_after_forward=False")  # fmt: skip
    assert code == 2
    assert "internal error: RuntimeError: a bug of ours" in err
    assert "please report it" in err


def _nested(size: int) -> str:
    """A DeepSpeed-like config literal of about ``size`` characters, nested three levels."""
    entry = {"x": ["y" * 50] * 4, "z": {"w": [1, 2, 3]}}
    return repr({f"k{index}": entry for index in range(size // len(repr(entry)))})


@pytest.mark.parametrize("json_output", [False, True], ids=["plain", "json"])
def test_a_long_value_is_echoed_bounded(capsys: pytest.CaptureFixture[str], json_output: bool) -> None:
    """Issue 38, item 7: ``--set config=<120 KB>`` printed 388 K characters (the call, the JSON request, messages)."""
    import json

    value = _nested(120_000)
    argv = ["check", "--strategy", "deepspeed", "--accelerator", "cpu", "--set", f"config={value}"]
    code, out, err = run_cli(capsys, *argv, *(["--json"] if json_output else []))
    assert code == 0, err[-2000:]
    assert len(out) + len(err) < 6000, (len(out), len(err))
    assert f"<{len(value):,} characters>" in out  # how long the value was, not the value
    if json_output:
        json.loads(out)


def test_a_message_that_quotes_a_long_value_is_bounded(capsys: pytest.CaptureFixture[str]) -> None:
    """Lightning's own refusal quotes the value (LP700): the finding's message is bounded as it is printed."""
    code, out, err = run_cli(capsys, *DEEPSPEED, "--set", f"logging_level={'N' * 100_000}")
    assert code == 1
    assert "Unknown level:" in out
    assert len(out) + len(err) < 20_000, (len(out), len(err))
    assert "characters>" in out
