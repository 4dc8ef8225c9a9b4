"""What the preset classes' heads and mixins share: the next class of a composed class, as the type checker sees it.

A composed class is ``head + family mixin + Lightning class`` (the registry builds it at run time), so a head's or a
mixin's ``super()`` reaches a class mypy cannot know. :class:`Next` is what it sees instead: every public hook of
Lightning's strategies and precision plugins that a head or mixin calls through ``super()``, typed ``Any`` (the
private ones are overridden, and typed, only in ``registry.private``). At run time it is
``object``: ``super()`` is plain ``super()``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:

    class Next:
        """The hooks of the next class (a family mixin, Lightning's strategy or precision plugin) that ours call."""

        def __init__(self, *args: Any, **kwargs: Any) -> None: ...

        connect: Any
        convert_module: Any
        load_checkpoint: Any
        on_exception: Any
        post_backward: Any
        setup: Any
        setup_environment: Any
        setup_module: Any
        setup_module_and_optimizers: Any
        setup_optimizer: Any
        setup_optimizers: Any

else:
    Next = object
