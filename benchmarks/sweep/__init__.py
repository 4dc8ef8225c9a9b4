"""The guard sweep behind ``benchmarks/bench_guard_sweep.py``: sampling (``space``), the guards' verdict
(``verdict``), starting the processes (``launch``), classifying a run against its reference (``classify``) and
one configuration end to end (``runner``). The job itself is ``tests/scripts/sweep_worker.py``."""
