"""``acme-bf16``: Acme's standard precision, declared from Lightning's ``MixedPrecision`` plugin.

lightning-presets adds its hardware guards to every precision preset: no CUDA device (LP603), a compute capability
below ``min_capability`` (LP604) or one it cannot read (LP605).
"""

from __future__ import annotations

from lightning_presets import PrecisionPreset

ACME_BF16 = PrecisionPreset(
    name="acme-bf16",
    description="Acme's standard precision: bf16 autocast with fp32 weights, on Acme's A100 and H100 nodes.",
    plugin={"trainer": "MixedPrecision", "fabric": "MixedPrecision"},
    init_params={"precision": "bf16-mixed", "device": "cuda"},
    min_capability=(8, 0),
    capability_reason="Acme's nodes are A100s and H100s, and bf16 arithmetic arrived with Ampere",
    tested_with={"lightning": "2.6.6", "torch": "2.13.0", "evidence": "construction (simulated CUDA)"},
)
