"""Guard rules: pure functions over a snapshot, each declaring its code, severity and examples."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from lightning_presets.core.codes import DEFAULT_SETTING, Code, Setting
from lightning_presets.core.environment import skipped_rules
from lightning_presets.core.findings import Finding, Severity

Stage = Literal["options", "construction", "trainer", "model", "setup", "optimizers", "resume", "check"]
"""When a rule runs.

``options``: on the preset's arguments, when the strategy object is built.
``construction``: on the final :class:`~lightning_presets.Context`, inside ``Trainer(...)``/``Fabric(...)``.
``trainer``: on that context completed with the Trainer's own settings (``accumulate_grad_batches``), once the
Trainer exists: when ``fit`` connects the model, and in ``lightning-presets check`` right after construction.
``model``: on the context and the model, before the first collective and before any heavy work.
``setup``: on the context and the model once it is complete (after ``configure_model``), just before the
strategy wraps it; run by the family's own hook.
``optimizers``: on the context, the model (``None`` when Fabric sets an optimizer up alone) and the optimizers
``configure_optimizers`` returned (Fabric: those passed to ``setup``), before the strategy takes them over.
``resume``: on the context and the checkpoint about to be loaded (``Trainer.fit(ckpt_path=...)``, ``Fabric.load``),
before any of its bytes are loaded.
``check``: ``lightning-presets check``'s own rules on the job it simulates (cluster consistency); not a preset stage.
"""
PRESET_STAGES: tuple[Stage, ...] = ("options", "construction", "trainer", "model", "setup", "optimizers", "resume")
"""The stages a preset's rules may declare."""
MODEL_STAGES: tuple[Stage, ...] = ("model", "setup", "optimizers")
"""The stages whose rules need the model (or its optimizers): before it exists they can only report their condition."""


class Problem(NamedTuple):
    """What a rule function returns when it fires: the message and the hint."""

    message: str
    hint: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Rule(Code):
    """A guard: a :class:`~lightning_presets.core.codes.Code` and the pure function that checks it."""

    check: Callable[..., Problem | None]
    """Returns a :class:`Problem` when the rule fires, ``None`` when it does not."""
    unless: str = ""
    """For a rule of a model stage: what the model must do for the job to be right, said before the model exists
    (``"your LightningModule overrides configure_gradient_clipping"``); empty: the rule says nothing before."""
    when: Callable[[Any], bool] | None = None
    """For a rule with :attr:`unless`: whether the rest of the job (the :class:`~lightning_presets.Context`) makes the
    model matter at all (``lambda ctx: ctx.clips_by_norm``); ``None``: always. A condition every job of the preset
    meets (a tp2d_hybrid Trainer needs configure_model) belongs in the preset's description, not in a warning each
    construction repeats."""
    consequence: str = ""
    """What happens when the model does not meet :attr:`unless` (``"the first optimizer step raises on every
    rank"``)."""
    shows: tuple[str, ...] = ()
    """The user's arguments the conditional warning repeats (``("gradient_clip_val",)``)."""
    construction: bool = True
    """Whether ``Trainer(...)``/``Fabric(...)`` reports the conditional warning. ``False`` for a condition on every
    model of the preset's jobs (DeepSpeed's one optimizer): a warning each construction repeated would say what the
    preset's description says; ``lightning-presets check`` without ``--model`` still names it, since silence there
    reads as valid."""
    supersedes: tuple[Rule, ...] = ()
    """Rules this one silences when it fires (it names the same fault more precisely): :func:`run_rules` drops their
    findings. It takes the arguments of the rules it supersedes; it is checked for them when they run, even when it is
    skipped or of another stage."""

    def __call__(self, *args: Any) -> Finding | None:
        problem = self.check(*args)
        if problem is None:
            return None
        if not isinstance(problem, Problem):
            raise TypeError(f"it returned a {type(problem).__name__}, not a Problem or None")
        message, hint = problem
        if not (isinstance(message, str) and isinstance(hint, str)):
            raise TypeError(
                f"it returned a Problem whose message and hint are {type(message).__name__} and "
                f"{type(hint).__name__}; both must be str"
            )
        return self.finding(str.__str__(message), str.__str__(hint))  # plain str, whatever a subclass overrides


def rule(
    code: str,
    severity: Severity,
    stage: Stage,
    title: str,
    *,
    fails: str,
    fixed: str,
    evidence: str = "",
    setting: Setting = DEFAULT_SETTING,
    fixed_setting: Setting | None = None,
    unless: str = "",
    when: Callable[[Any], bool] | None = None,
    consequence: str = "",
    shows: tuple[str, ...] = (),
    construction: bool = True,
    supersedes: tuple[Rule, ...] = (),
) -> Callable[[Callable[..., Problem | None]], Rule]:
    """Turn a function returning :class:`Problem` or ``None`` into a :class:`Rule`; a rule of a model stage that
    declares ``unless`` (and ``consequence``, and ``when`` to say when it matters) reports a conditional warning until
    the model is known (:func:`conditional_findings`)."""
    if unless and (stage not in MODEL_STAGES or not consequence):
        raise ValueError(f"rule {code}: `unless` needs a model stage ({', '.join(MODEL_STAGES)}) and a `consequence`")

    def wrap(check: Callable[..., Problem | None]) -> Rule:
        qualname = getattr(check, "__qualname__", "")
        if "<locals>" in qualname:  # made by a rule factory: named after the factory and the code, for LP012 and `show`
            with contextlib.suppress(AttributeError, TypeError):
                check.__qualname__ = f"{qualname.split('.<locals>')[0]}[{code}]"
        return Rule(
            code=code, severity=severity, stage=stage, title=title, check=check, fails=fails, fixed=fixed,
            evidence=evidence, setting=setting, fixed_setting=fixed_setting, unless=unless, when=when,
            consequence=consequence, shows=shows, construction=construction, supersedes=supersedes,
        )  # fmt: skip

    return wrap


def run_rules(rules: Iterable[Rule], stage: Stage, *args: Any) -> list[Finding]:
    """Every finding of the rules of one stage, in declaration order.

    A rule that raises (anything but ``KeyboardInterrupt``: ``SystemExit`` and other ``BaseException`` subclasses
    included) or returns something other than a :class:`Problem` of two strings becomes an LP012 finding that blames
    its preset and the distribution that published the rule, never the user's configuration. Rules whose code
    ``LIGHTNING_PRESETS_SKIP`` names (or every rule, with ``all``) do not report. A rule that fires silences the
    rules it :attr:`~Rule.supersedes`: it is checked for that on the same arguments even when it is skipped or of
    another stage (a ``trainer`` rule superseding a ``construction`` rule), its finding then not reported.
    """
    skipped = skipped_rules()
    if "ALL" in skipped:
        return []
    rules = tuple(rules)
    here = {each.code for each in rules if each.stage == stage}
    found: list[tuple[Rule, Finding]] = []
    silenced: set[str] = set()
    for each in rules:
        report = each.stage == stage and str(each.code).upper() not in skipped
        if not report and not any(other.code in here for other in each.supersedes):
            continue
        try:
            finding = each(*args)
        except KeyboardInterrupt:
            raise
        except BaseException as error:  # a bug in the rule (even sys.exit): the preset's fault, never raised raw
            finding = crashed(each, args[0] if args else None, error) if report else None
        if finding is None:
            continue
        if finding.code == each.code:  # fired (not crashed): the rules it supersedes stay quiet
            silenced.update(other.code for other in each.supersedes)
        if report:
            found.append((each, finding))
    return [finding for each, finding in found if each.code not in silenced]


_DECIDED_AT = {
    "model": "when fit (Fabric: setup) gets the model",
    "setup": "when configure_model has run, before the strategy wraps the model",
    "optimizers": "when configure_optimizers has returned (Fabric: when setup gets the optimizers)",
}


def condition(code: str, call: str, consequence: str, unless: str, decided: str) -> Finding:
    """The conditional warning of a check that needs the model: what happens, unless what the model must do, and when
    it is decided."""
    return Finding(
        code=code,
        severity="warning",
        conditional=True,
        message=f"{call}: {consequence}, unless {unless}; decided {decided}",
        hint=f"make sure {unless}, or decide it now: `lightning-presets check ... --model MODULE:FACTORY`",
    )


def conditional_findings(rules: Iterable[Rule], context: Any, *, construction: bool = True) -> list[Finding]:
    """What the model-stage rules with a condition (:attr:`Rule.unless`) can say before the model exists: one warning
    per rule whose :attr:`Rule.when` holds for ``context``, with the rule's own code, naming what the model must do.
    The rule itself decides when its stage comes (and ``lightning-presets check --model`` decides it before launch).
    ``construction``: the rules whose :attr:`Rule.construction` is that (``False``: the conditions only ``check`` says).
    Skipped rules say nothing; a ``when`` that raises is that rule's LP012."""
    skipped = skipped_rules()
    findings = []
    for each in rules:
        if not each.unless or each.stage not in MODEL_STAGES or "ALL" in skipped or each.code.upper() in skipped:
            continue
        if each.construction != construction:
            continue
        try:
            relevant = each.when is None or bool(each.when(context))
        except KeyboardInterrupt:
            raise
        except BaseException as error:  # a bug in the condition: the preset's fault, never the user's
            findings.append(crashed(each, context, error))
            continue
        if not relevant:
            continue
        preset = getattr(context, "preset", "?")
        call = context.call(*each.shows) if hasattr(context, "call") else f"strategy={preset!r}"
        findings.append(condition(each.code, call, each.consequence, each.unless, _DECIDED_AT[each.stage]))
    return findings


# Which distribution published each rule's function (the catalog records it as it loads presets).
_origins: dict[Any, tuple[str, str]] = {}


def record_origin(each: Rule, distribution: str, version: str) -> None:
    """Remember the distribution of a rule's function; the first distribution to publish it keeps it."""
    with contextlib.suppress(TypeError):  # an unhashable callable: reported by its module instead
        _origins.setdefault(each.check, (distribution, version))


RULE_CRASHED = Code(
    code="LP012", severity="error", stage="construction", title="a preset's rule that crashed instead of checking",
    fails="# acme-presets' rule: def eight_per_node(ctx): return 8 // (ctx.devices_per_node - 8)\n"
    'Trainer(strategy="acme_ddp", accelerator="cpu", devices=8)',
    fixed='Trainer(strategy="ddp", accelerator="cpu", devices=8)   # LIGHTNING_PRESETS_DENY=acme-presets meanwhile',
    evidence="runtime: the rule's own ZeroDivisionError, which escaped from Trainer(...) before LP012",
)  # fmt: skip


MAX_ERROR_TEXT = 300
"""The most characters of a third party's exception message a finding repeats."""


def error_text(error: BaseException) -> str:
    """``Type: first line of the message`` of any exception, even one whose ``__str__`` raises or is huge."""
    name = type(error).__name__
    try:
        text = str(error)
    except KeyboardInterrupt:
        raise
    except BaseException as inner:  # a third party's broken __str__ must not replace its own error
        return f"{name} (whose message cannot be shown: its __str__ raised {type(inner).__name__})"
    first = (text.strip().splitlines() or [""])[0]
    if len(first) > MAX_ERROR_TEXT:
        first = first[:MAX_ERROR_TEXT] + "..."
    return f"{name}: {first}" if first else name


def _function_name(check: Any) -> str:
    try:
        return f"{getattr(check, '__module__', '?')}.{getattr(check, '__qualname__', type(check).__name__)}"
    except Exception:  # a callable object whose attributes raise
        return f"a {type(check).__name__}"


def crashed(each: Rule, context: Any, error: BaseException) -> Finding:
    """LP012: the rule ``each`` raised ``error`` (or returned the wrong type) while checking ``context``."""
    function = _function_name(each.check)
    try:
        origin = _origins.get(each.check)
    except Exception:  # an unhashable (or worse) callable: reported by its module
        origin = None
    preset = getattr(context, "preset", None)
    of_preset = f" of preset {preset!r}" if isinstance(preset, str) else ""
    source = f"{origin[0]} {origin[1]}" if origin else f"the module {function.rpartition('.')[0]}"
    skip = f"; meanwhile skip it with LIGHTNING_PRESETS_DENY={origin[0]} or use another preset" if origin else ""
    return RULE_CRASHED.finding(
        f"rule {each.code}{of_preset} ({function}, from {source}) failed instead of checking the "
        f"configuration: {error_text(error)}; the configuration was not checked",
        f"this is a bug in {source}, not in your configuration: report it there{skip}",
    )
