"""The explanation at the moment of failure: the cause and the fix appended to an exception as notes.

An exception raised inside a preset's run keeps its message, type and traceback; :func:`annotate` only adds notes
(``BaseException.add_note``) naming the signature's code, the cause, the fix and what a probe of this machine found.
Nothing here may hide or change the user's exception: every step is contained, and a failure of our own adds nothing.

The Trainer's head calls :func:`explained` around Lightning's ``on_exception`` (Lightning's interrupt handling calls it
for every exception of ``fit``/``validate``/``test``/``predict``); Lightning's DDP strategy rewrites one message there,
and the note then keeps the original text. Fabric has no such hook: :func:`explaining` wraps the Fabric head's methods
that run the user's work (see its docstring).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from lightning_presets.failures.model import Match

MARK = "lightning-presets explain"
"""Every note starts with it; an exception that has one is not annotated twice."""
MAX_NOTES = 2
"""At most this many signatures are explained on one exception (the most specific first)."""
MAX_MESSAGE = 4096
"""Of a longer message only its first and last this many characters are matched: a signature's text is at an end
(the exception's own words first, a chained error's last), and a long message (a key list, a hex dump) must not
make the note cost more than a few milliseconds."""

T = TypeVar("T", bound=type)


def _text(exception: BaseException) -> str:
    """The exception's type and message, and those of the exceptions it was raised from."""
    parts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exception
    while current is not None and id(current) not in seen and len(parts) < 8:
        seen.add(id(current))
        parts.append(_bounded(f"{type(current).__module__}.{type(current).__qualname__}: {current}"))
        current = current.__cause__ or current.__context__
    return "\n".join(parts)


def _bounded(text: str) -> str:
    if len(text) <= 2 * MAX_MESSAGE:
        return text
    return f"{text[:MAX_MESSAGE]}\n...\n{text[-MAX_MESSAGE:]}"


def explanation(exception: BaseException, original: str | None = None) -> list[str]:
    """The notes :func:`annotate` would add: one per signature that matches the exception (or ``original``, the text
    it had before something rewrote it), with what the signature's probe found on this machine."""
    # The signatures load here, when an exception is explained, not when a guard head is defined: they are most of
    # what `import lightning_presets` would otherwise spend on this package.
    from lightning_presets.failures.model import matches
    from lightning_presets.failures.probes import run_probe
    from lightning_presets.failures.signatures import SIGNATURES

    text = _text(exception) + ("\n" + _bounded(original) if original else "")
    found: list[Match] = []
    for match in matches(text, SIGNATURES):
        if all(match.signature is not other.signature for other in found):
            found.append(match)
    notes = []
    for match in found[:MAX_NOTES]:
        signature = match.signature
        probed = run_probe(signature.probe, text)
        lines = [f"{MARK} [{signature.code} {signature.category}]: {match.cause}.", f"  fix: {signature.fix}"]
        if probed:
            lines.append(f"  this machine: {probed}")
        notes.append("\n".join(lines))
    return notes


def annotate(exception: BaseException, original: str | None = None) -> None:
    """Append the explanation to ``exception`` as notes; never raises, never changes its message or type.

    ``original``: the message before something (Lightning's DDP strategy) rewrote it; a note keeps it when it differs.
    """
    try:
        if not isinstance(exception, Exception) or any(
            isinstance(note, str) and note.startswith(MARK) for note in getattr(exception, "__notes__", ())
        ):
            return
        notes = explanation(exception, original)
        if original is not None and original != str(exception):
            notes.insert(0, f"{MARK}: Lightning replaced this exception's message; the original was:\n{original}")
        for note in notes:
            _add_note(exception, note)
    except Exception:  # our own failure must never hide or change the user's exception
        return


def _add_note(exception: BaseException, note: str) -> None:
    """``add_note`` (Python 3.11+); on 3.10 the same ``__notes__`` list, which 3.10's own traceback does not print
    (the ``exceptiongroup`` backport's and pytest's do)."""
    add = getattr(exception, "add_note", None)
    if add is not None:
        add(note)
        return
    notes = getattr(exception, "__notes__", None)
    if not isinstance(notes, list):
        notes = []
        exception.__notes__ = notes
    notes.append(note)


@contextlib.contextmanager
def explained(exception: BaseException) -> Iterator[None]:
    """Run the body (Lightning's ``on_exception``), then annotate ``exception``, keeping its message as it was before
    the body in case the body rewrote it."""
    try:
        before: str | None = str(exception)
    except Exception:  # an exception whose __str__ fails: nothing to keep
        before = None
    try:
        yield
    finally:
        annotate(exception, before)


def _explaining_call(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except Exception as error:
            annotate(error)
            raise

    return call


def explaining(*names: str) -> Callable[[T], T]:
    """A class decorator for a strategy head: each named method annotates the exception it raises, then re-raises it.

    Fabric has no ``on_exception``: the user's loop runs in the user's code. The head's methods are the least
    invasive place that sees the failures: ``setup_environment`` (rendezvous and process-group creation),
    ``setup_module``/``setup_module_and_optimizers`` (wrapping, DeepSpeed's engine, DDP's first broadcast),
    ``backward`` and ``optimizer_step`` (the step's collectives, the reducer, out-of-memory), the collectives
    ``Fabric`` exposes and ``load_checkpoint``. No global hook (``sys.excepthook``) is installed: what the user
    catches stays theirs. The forward pass runs in the wrapped module, not through the strategy, and is not covered.
    A method the head does not define calls the next class's, as ``super()`` would.
    """

    def decorate(cls: T) -> T:
        for name in names:
            own = cls.__dict__.get(name)
            if own is None:

                def forward(self: Any, *args: Any, __name: str = name, **kwargs: Any) -> Any:
                    return getattr(super(cls, self), __name)(*args, **kwargs)

                forward.__name__ = forward.__qualname__ = name
                own = forward
            setattr(cls, name, _explaining_call(own))
        return cls

    return decorate
