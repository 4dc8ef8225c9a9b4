"""Tests mirroring ``lightning_presets.plugins``: a rule module's executed proofs, accepted neighbours and unit tests in
one test module named after it (``test_presets.py`` for ``plugins/presets.py``).

The proofs' helpers (``proof.py``, ``jobs.py``) and plugin (``proving.py``, loaded by ``conftest.py``) live in
``tests/evidence/``: that folder is put on ``sys.path`` here, so the modules import them inside and outside pytest.
"""

import sys
from pathlib import Path

_EVIDENCE = str(Path(__file__).resolve().parents[1] / "evidence")
if _EVIDENCE not in sys.path:
    sys.path.append(_EVIDENCE)
