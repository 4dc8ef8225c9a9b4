"""Findings, the error that carries them, the warning that carries one, and ``report``."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from lightning_presets import Finding, PresetConfigError, PresetWarning
from lightning_presets.core.findings import report


def finding(code: str = "LP001", severity: str = "error", message: str = "m", hint: str = "h") -> Finding:
    return Finding(code=code, severity=severity, message=message, hint=hint)  # type: ignore[arg-type]


@pytest.mark.parametrize("code", ["LP1", "LP1234", "lp001", "XX001", "LP00a", " LP001", "LP001 "])
def test_finding_code_must_be_lp_and_three_digits(code: str) -> None:
    with pytest.raises(ValueError, match=r"must be 'LP' followed by three digits"):
        finding(code=code)


@pytest.mark.parametrize("severity", ["Error", "info", ""])
def test_finding_severity_is_error_or_warning(severity: str) -> None:
    with pytest.raises(ValueError, match=r"must be 'error' or 'warning'"):
        finding(severity=severity)


def test_finding_is_keyword_only_frozen_and_hashable() -> None:
    with pytest.raises(TypeError):
        Finding("LP001", "error", "m", "h")  # type: ignore[call-arg]
    item = finding()
    with pytest.raises(AttributeError):
        item.code = "LP002"  # type: ignore[misc]
    assert {item, finding()} == {item}


def test_finding_str_and_dict() -> None:
    error = finding(code="LP203", message="tensor_parallel_size=3 does not divide 8", hint="use 2, 4 or 8")
    assert str(error) == "[LP203] tensor_parallel_size=3 does not divide 8\n  hint: use 2, 4 or 8"
    warning = finding(code="LP106", severity="warning", message="one device", hint="use 8")
    assert str(warning) == "[LP106] (warning) one device\n  hint: use 8"
    assert warning.as_dict() == {"code": "LP106", "severity": "warning", "message": "one device", "hint": "use 8"}


def test_error_orders_errors_first_and_keeps_order_within_each() -> None:
    w1, e1, w2, e2 = (
        finding("LP106", "warning", "w1"),
        finding("LP101", "error", "e1"),
        finding("LP204", "warning", "w2"),
        finding("LP102", "error", "e2"),
    )
    error = PresetConfigError([w1, e1, w2, e2])
    assert error.findings == (e1, e2, w1, w2)
    assert error.codes == ("LP101", "LP102", "LP106", "LP204")
    assert str(error) == "\n".join(map(str, (e1, e2, w1, w2)))


def test_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match=r"\[LP101\] e1") as excinfo:
        raise PresetConfigError([finding("LP101", "error", "e1")])
    assert isinstance(excinfo.value, PresetConfigError)


def test_warning_carries_its_finding() -> None:
    item = finding("LP106", "warning", "one device", "use 8")
    with pytest.warns(PresetWarning, match=r"\[LP106\] \(warning\) one device") as caught:
        warnings.warn(PresetWarning(item), stacklevel=1)
    (record,) = caught
    assert isinstance(record.message, PresetWarning)
    assert record.message.finding is item
    assert issubclass(PresetWarning, UserWarning)


def test_report_raises_all_findings_if_any_is_an_error() -> None:
    warning, error = finding("LP106", "warning"), finding("LP101", "error")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning is issued when raising
        with pytest.raises(PresetConfigError) as excinfo:
            report([warning, error])
    assert excinfo.value.findings == (error, warning)


def test_report_warns_each_warning() -> None:
    first, second = finding("LP106", "warning", "a"), finding("LP204", "warning", "b")
    with pytest.warns(PresetWarning) as caught:
        report(iter([first, second]))
    assert [record.message.finding for record in caught] == [first, second]  # type: ignore[union-attr]


def test_report_of_nothing_does_nothing() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report([])


def test_report_points_the_warning_at_the_caller() -> None:
    """Frames of Lightning and of this package are skipped: the warning shows the user's own line."""
    library: dict[str, object] = {"__name__": "lightning.pytorch.fake_module", "report": report, "finding": finding}
    exec("def library_function():\n    report([finding('LP106', 'warning')])\n", library)
    library_function = library["library_function"]

    def user_code() -> None:
        library_function()  # type: ignore[operator]

    with pytest.warns(PresetWarning) as caught:
        user_code()
    assert caught[0].lineno == user_code.__code__.co_firstlineno + 1


def test_construction_warnings_point_at_the_users_trainer_line() -> None:
    """A PresetWarning raised inside Trainer(...) (through Lightning's argparse wrapper and connector) and inside
    Fabric(...) is attributed to the line of this file that constructs it, not to Lightning's frames."""
    from lightning.fabric import Fabric
    from lightning.pytorch import Trainer

    with pytest.warns(PresetWarning) as caught:
        Trainer(strategy="ddp_static_graph", accelerator="cpu", devices=1, logger=False)  # LP305: one process
    (record,) = [each for each in caught if isinstance(each.message, PresetWarning)]
    assert (record.filename, record.lineno) == (__file__, _line_of("# LP305: one process"))
    with pytest.warns(PresetWarning) as caught:
        Fabric(strategy="ddp_static_graph", accelerator="cpu", devices=1)  # LP305 again
    (record,) = [each for each in caught if isinstance(each.message, PresetWarning)]
    assert (record.filename, record.lineno) == (__file__, _line_of("# LP305 again"))


def _line_of(marker: str) -> int:
    lines = Path(__file__).read_text(encoding="utf-8").splitlines()
    return next(number for number, text in enumerate(lines, 1) if text.rstrip().endswith(marker))
