"""``check --model``'s rehearsal: the user's real set-up, first validation step and first training step, run by
Lightning's own ``Trainer.fit`` in a child process, before the job is queued (issue 35).

What runs: the model built by the user's factory; Lightning's fit-start validation, ``configure_optimizers`` with the
real optimizer over the model's parameters and Lightning's reading of its schedulers (``lr_scheduler`` dicts,
``monitor``, ``interval``); the first batch of the model's own ``val_dataloader()`` through ``validation_step`` (the
sanity check) and of its ``train_dataloader()`` (else ``example_input_array``) through ``training_step``, the loss
Lightning reads from its output, ``self.log``, backward, gradient clipping, the optimizer step and the scheduler
update; with the job's precision and Trainer clipping and accumulation. For a DeepSpeed job, Lightning's
``DeepSpeedStrategy`` reading of the optimizers and schedulers (one of each at most) runs on what the model returns.

Where it runs: one CPU process, real tensors, ``Trainer(accelerator="cpu", devices=1)``, inside torch's fake process
group of the job's world size (the step's own ``torch.distributed`` calls return at once): a model of up to
:data:`MAX_PARAMETERS` parameters (a larger one runs the step ``plan`` traces under fake tensors instead, the same
codes for its failures: :mod:`.fake`). What one CPU process
cannot rehearse is said, never blamed on the user: the strategy's wrapping on the job's device mesh (DDP, FSDP2,
tensor parallelism, DeepSpeed's engine), collectives between ranks, CUDA kernels and a precision this CPU cannot run
(``16-mixed`` is rehearsed as ``bf16-mixed``). A failure the rehearsal causes itself (code that needs CUDA) is a
warning that it could not finish.

Ranks: rank 0 and the ranks whose code can differ (the last rank, the first rank of the second node) are rehearsed
side by side, each in its own child as that rank (Lightning's ``global_rank``, ``local_rank`` and ``node_rank`` and
torch's fake process group say so); each one's collectives are recorded and compared (:mod:`.collectives`): a
collective some ranks enter and others do not, or enter with other shapes, is LP744.

Modules: :mod:`.runner` (the child processes), :mod:`.child` (the rehearsal in the child, and the plug-in stages'
contract :func:`.child.strategy_stages`), :mod:`.collectives` (recording and comparing the ranks' collectives),
:mod:`.findings` (codes, results, findings).
"""

from __future__ import annotations

from lightning_presets.tools.check.rehearsal.child import MAX_PARAMETERS, rehearse_in_process
from lightning_presets.tools.check.rehearsal.findings import (
    CODES,
    FORKED_AUTOGRAD,
    NOT_REHEARSED,
    RANKS_DISAGREE,
    SETUP_FAILS,
    STAGES,
    TRAINING_STEP_FAILS,
    VALIDATION_STEP_FAILS,
    Rehearsal,
    RehearsalCrashed,
    RehearsalFailed,
    StageRecord,
    findings,
    user_line,
)
from lightning_presets.tools.check.rehearsal.runner import (
    DEFAULT_TIMEOUT_S,
    ranks_to_rehearse,
    rehearse,
    trainer_arguments,
)

__all__ = ["CODES", "DEFAULT_TIMEOUT_S", "FORKED_AUTOGRAD", "MAX_PARAMETERS", "NOT_REHEARSED", "RANKS_DISAGREE",
           "SETUP_FAILS", "STAGES", "TRAINING_STEP_FAILS", "VALIDATION_STEP_FAILS", "Rehearsal", "RehearsalCrashed",
           "RehearsalFailed", "StageRecord", "findings", "ranks_to_rehearse", "rehearse", "rehearse_in_process",
           "trainer_arguments", "user_line"]  # fmt: skip
