"""How many real models the rehearsal completes (issue 35, item 2): ``check --model`` on real model definitions under
``ddp_static_graph``, ``fsdp2`` and ``tp2d_hybrid`` on a simulated 8-GPU node, each recorded as ``completed`` (no
error, no LP743, and the check's rehearsal note lists both the child's fit to the first training step and the
strategy's set-up stages completed), ``finding`` (the error codes) or ``could not finish`` (LP743, with its reason).

The models: ``transformers`` configs built from config (no download; tiny: 2 layers, hidden 64), each wrapped in a
LightningModule whose step returns the model's own loss, with AdamW and a ``train_dataloader`` of random batches;
the project's example models (``examples/quickstart.py``'s ``TinyRegressor``, ``tests/models.py``'s
``TinyTransformer`` with and without its tensor-parallel plan) and the held-out set's legal models
(``benchmarks/rehearsal_heldout/rehearsal_models.py``). Every model here trains (each is legal): an error finding on
one is a false refusal. ``tp2d_hybrid`` needs the model's own ``parallelize_module`` plan in ``configure_model``:
it is run for the models that have one and said skipped for the others.

Run: ``python benchmarks/bench_rehearsal_coverage.py`` (results in ``benchmarks/results/rehearsal_coverage.txt``).
``transformers`` is not in the test extra; without it the ``transformers`` models are said skipped.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for folder in (HERE, HERE / "rehearsal_heldout", ROOT):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

import torch  # noqa: E402
from lightning.pytorch import LightningModule  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

MODULE = "bench_rehearsal_coverage"
PRESETS = ("ddp_static_graph", "fsdp2", "tp2d_hybrid", "tp2d_hybrid@4x2")
"""``tp2d_hybrid`` on 1 node of 8 GPUs (tensor_parallel=8) and on 4 nodes of 2 (tensor_parallel=2, data_parallel=4)."""
WORLD = 8
VOCAB, SEQ, HIDDEN = 256, 16, 64


class HF(LightningModule):
    """A ``transformers`` model built from its config, trained on its own loss."""

    def __init__(self, model: Any, batch: dict[str, torch.Tensor]) -> None:
        super().__init__()
        self.model = model
        self.batch = batch

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = self.model(**batch).loss
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-4)

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader([self.batch, self.batch], batch_size=None)  # type: ignore[arg-type]


def _tokens(batch: int = 4) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, SEQ))


def _causal(config_cls: str, **sizes: Any) -> HF:
    import transformers

    torch.manual_seed(0)
    config = getattr(transformers, config_cls)(vocab_size=VOCAB, **sizes)
    model = transformers.AutoModelForCausalLM.from_config(config)
    tokens = _tokens()
    return HF(model, {"input_ids": tokens, "labels": tokens})


def gpt2() -> HF:
    return _causal("GPT2Config", n_layer=2, n_embd=HIDDEN, n_head=4, n_positions=64)


def llama() -> HF:
    return _causal("LlamaConfig", hidden_size=HIDDEN, intermediate_size=128, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)  # fmt: skip


def mistral() -> HF:
    return _causal("MistralConfig", hidden_size=HIDDEN, intermediate_size=128, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)  # fmt: skip


def qwen2() -> HF:
    return _causal("Qwen2Config", hidden_size=HIDDEN, intermediate_size=128, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)  # fmt: skip


def bert() -> HF:
    import transformers

    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=128, max_position_embeddings=64, num_labels=3)  # fmt: skip
    model = transformers.BertForSequenceClassification(config)
    return HF(model, {"input_ids": _tokens(), "labels": torch.randint(0, 3, (4,))})


def t5() -> HF:
    import transformers

    torch.manual_seed(0)
    config = transformers.T5Config(vocab_size=VOCAB, d_model=HIDDEN, d_kv=16, d_ff=128, num_layers=2,
                                   num_decoder_layers=2, num_heads=4, decoder_start_token_id=0)  # fmt: skip
    model = transformers.T5ForConditionalGeneration(config)
    return HF(model, {"input_ids": _tokens(), "labels": _tokens()})


def vit() -> HF:
    import transformers

    torch.manual_seed(0)
    config = transformers.ViTConfig(image_size=32, patch_size=8, hidden_size=HIDDEN, num_hidden_layers=2,
                                    num_attention_heads=4, intermediate_size=128, num_labels=10)  # fmt: skip
    model = transformers.ViTForImageClassification(config)
    return HF(model, {"pixel_values": torch.randn(4, 3, 32, 32), "labels": torch.randint(0, 10, (4,))})


class _Sequences(LightningModule):
    """``tests/models.py``'s ``TinyTransformer`` on next-token loss; with ``plan``, its tensor-parallel plan in
    ``configure_model`` (``tests/models.parallelize``)."""

    def __init__(self, plan: bool = False) -> None:
        super().__init__()
        from tests.models import TinyTransformer

        torch.manual_seed(0)
        self.model = TinyTransformer()
        self.plan = plan

    def configure_model(self) -> None:
        if self.plan:
            from tests.models import parallelize

            parallelize(self.model, self.device_mesh)

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        from tests.models import next_token_loss

        return next_token_loss(self.model, batch)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)

    def train_dataloader(self) -> DataLoader[Any]:
        from tests.models import counting_sequences

        return DataLoader(counting_sequences(8), batch_size=4)  # type: ignore[arg-type]


def tiny_transformer() -> LightningModule:
    return _Sequences()


def tiny_transformer_tp() -> LightningModule:
    return _Sequences(plan=True)


def quickstart() -> LightningModule:
    """``examples/quickstart.py``'s model with its own data (it is given to ``fit`` there)."""
    sys.path.insert(0, str(ROOT / "examples"))
    import quickstart as example

    class Quickstart(example.TinyRegressor):  # type: ignore[misc]
        def train_dataloader(self) -> Any:
            return example.random_regression()

    return Quickstart()


TRANSFORMERS = ("gpt2", "llama", "mistral", "qwen2", "bert", "t5", "vit")
PROJECT = ("tiny_transformer", "tiny_transformer_tp", "quickstart")
TP_PLAN = {"tiny_transformer_tp", "quickstart"}
"""The models with a tensor-parallel plan; ``quickstart``'s ``configure_model`` asks for the 2D mesh, so only
``tp2d_hybrid`` runs it."""
ONLY_TP = {"quickstart", "tiny_transformer_tp"}
EXPECTED_FINDINGS = {("tiny_transformer_tp", "tp2d_hybrid"): "LP751"}
"""The rehearsals whose error is true: ``TinyTransformer`` has 4 heads of 8 features; column-wise over 8
tensor-parallel ranks each rank holds 4 of q's 32 features, and ``view(batch, length, -1, head_dim=8)`` raises (the
same model on tensor_parallel=2 trains)."""


def _heldout_legal() -> list[tuple[str, str]]:
    import cases

    return [(f"rehearsal_models:{case.model}", case.id) for case in cases.LEGAL]


def cases_to_run(with_transformers: bool) -> list[tuple[str, str, str]]:
    """(spec, label, preset), and the skipped ones with their reason as the preset's ``skip:`` entry."""
    out: list[tuple[str, str, str]] = []
    for name in (*TRANSFORMERS, *PROJECT):
        for preset in PRESETS:
            if name in TRANSFORMERS and not with_transformers:
                out.append((f"{MODULE}:{name}", name, f"skip:{preset}:transformers is not installed"))
            elif preset.startswith("tp2d_hybrid") and name not in TP_PLAN:
                out.append((f"{MODULE}:{name}", name, f"skip:{preset}:no parallelize_module plan in the model"))
            elif not preset.startswith("tp2d_hybrid") and name in ONLY_TP:
                out.append((f"{MODULE}:{name}", name, f"skip:{preset}:configure_model is written for the 2D mesh"))
            else:
                out.append((f"{MODULE}:{name}", name, preset))
    for spec, label in _heldout_legal():
        for preset in PRESETS[:2]:
            out.append((spec, f"heldout {label} {spec.split(':')[1]}", preset))
    return out


def check(spec: str, preset: str) -> dict[str, Any]:
    from lightning_presets.core.findings import UsageError
    from lightning_presets.tools.check import CheckRequest
    from lightning_presets.tools.verdict import run_check

    started = time.perf_counter()
    strategy, _, layout = preset.partition("@")
    nodes, devices = (int(each) for each in layout.split("x")) if layout else (1, WORLD)
    arguments = {"strategy": strategy, "accelerator": "cuda", "devices": devices, "num_nodes": nodes}
    request = CheckRequest(arguments=arguments, gpus=devices, model=spec)
    try:
        report = run_check(request)
    except UsageError as error:
        return {"outcome": "usage error", "why": str(error)[:300], "seconds": time.perf_counter() - started}
    except Exception as error:  # a crash of the package: reported
        return {"outcome": "crash", "why": "".join(traceback.format_exception(error)[-2:])[:400],
                "seconds": time.perf_counter() - started}  # fmt: skip
    found = [each.finding for each in report.reported]
    errors = [each for each in found if each.severity == "error"]
    limits = [each for each in found if each.code == "LP743"]
    seconds = time.perf_counter() - started
    if errors:
        return {"outcome": "finding " + ",".join(sorted({e.code for e in errors})),
                "why": " | ".join(e.message[:300] for e in errors), "seconds": seconds}  # fmt: skip
    if limits:
        return {"outcome": "could not finish (LP743)", "why": " | ".join(e.message[:300] for e in limits),
                "seconds": seconds}  # fmt: skip
    note = next((each for each in report.request.notes if each.startswith("rehearsal (")), "")
    stages = (
        note.split("): completed ", 1)[1].split(" (stages", 1)[0].split(";", 1)[0] if "): completed " in note else ""
    )
    if "first training step" not in stages or "set-up completed" not in note:  # the child's fit and the plug-in's
        return {"outcome": "partial", "why": f"completed: {stages or 'nothing'}; {note[:300]}", "seconds": seconds}
    return {"outcome": "completed", "why": "", "seconds": seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=str(HERE / "results" / "rehearsal_coverage.txt"))
    parser.add_argument("--only", nargs="*")
    args = parser.parse_args(argv)
    os.chdir(HERE)
    try:
        import transformers

        version = transformers.__version__
    except ImportError:
        version = ""
    started = time.perf_counter()
    lines: list[str] = []
    tally: dict[str, int] = {}
    false_refusals: list[str] = []
    true = 0
    for spec, label, preset in cases_to_run(bool(version)):
        if args.only and not any(each in label for each in args.only):
            continue
        if preset.startswith("skip:"):
            _, name, why = preset.split(":", 2)
            row = f"{label:44} {name:17} skipped: {why}"
        else:
            result = check(spec, preset)
            outcome = result["outcome"]
            kind = outcome.split(" (")[0].split(" LP")[0]
            tally[kind] = tally.get(kind, 0) + 1
            expected = EXPECTED_FINDINGS.get((spec.split(":")[1], preset))
            if kind in ("finding", "usage error", "crash") and not (expected and expected in outcome):
                false_refusals.append(f"{label} under {preset}")
            said = f" [expected: {expected}, a true failure]" if expected else ""
            true += bool(expected)
            row = (f"{label:44} {preset:17} {outcome}{said} ({result['seconds']:.1f} s)"
                   f"{': ' + result['why'] if result['why'] else ''}")  # fmt: skip
        print(row, flush=True)
        lines.append(row)
    ran = sum(tally.values())
    legal = ran - true
    import platform

    import lightning

    header = [
        "check --model on real models (benchmarks/bench_rehearsal_coverage.py): a simulated job of "
        f"{WORLD} GPUs (accelerator=cuda, --gpus and devices per node; 1 node of 8, or 4 nodes of 2 where said)",
        f"torch {torch.__version__}, lightning {lightning.__version__}, transformers {version or 'not installed'}, "
        f"python {platform.python_version()}, {os.cpu_count()} CPUs",
        f"rehearsals run: {ran} ({true} of a job that really fails, {legal} of legal jobs); "
        + ", ".join(f"{k}: {v}" for k, v in sorted(tally.items())),
        f"completed: {tally.get('completed', 0)}/{legal} legal jobs = "
        f"{tally.get('completed', 0) / max(1, legal):.0%}; false refusals (an error or a usage error on a legal job): "
        f"{len(false_refusals)}" + (f" ({'; '.join(false_refusals)})" if false_refusals else ""),
        f"total {time.perf_counter() - started:.0f} s",
        "",
    ]  # fmt: skip
    text = "\n".join([*header, *lines]) + "\n"
    print("\n".join(header))
    if not args.only:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
