"""Block detection (``inspection/blocks.py``): the largest repeated container, in time linear in the module tree."""

from __future__ import annotations

import time

from torch import nn

from lightning_presets.inspection.blocks import find_repeated_blocks


class Block(nn.Module):
    def __init__(self, width: int = 4) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)


def test_the_largest_container_of_one_type_wins() -> None:
    model = nn.Sequential(nn.Embedding(10, 4), nn.ModuleList([Block() for _ in range(3)]), nn.Linear(4, 2))
    assert find_repeated_blocks(model) == {Block}
    heads = nn.ModuleList([nn.Linear(64, 64), nn.Linear(64, 64)])  # more parameters than the 3 blocks
    assert find_repeated_blocks(nn.ModuleDict({"blocks": model, "heads": heads})) == {nn.Linear}


def test_no_repeated_container_and_containers_without_parameters() -> None:
    assert find_repeated_blocks(nn.Linear(3, 3)) == set()
    assert find_repeated_blocks(nn.Sequential(nn.ReLU(), nn.ReLU())) == set()  # nothing to shard
    assert find_repeated_blocks(nn.Sequential(nn.Linear(2, 2), nn.ReLU())) == set()  # two types


def test_a_module_shared_by_two_containers_is_counted_in_both() -> None:
    shared = Block(8)
    first = nn.ModuleList([shared, shared])  # the same block twice: a one-type container of 2 entries
    model = nn.ModuleDict(
        {"first": first, "second": nn.ModuleList([Block(), Block()]), "again": nn.ModuleList([shared, Block(8)])}
    )
    assert find_repeated_blocks(model) == {Block}


def test_a_deep_chain_of_containers_costs_linear_time() -> None:
    """10,000 nested containers: a count per container (every container walking its whole subtree) took about 10 s
    here and grows with the square (103 s at 100,000); one pass takes well under a second, and no recursion meets
    the interpreter's limit."""

    def timed(depth: int) -> float:
        model: nn.Module = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
        for _ in range(depth):
            model = nn.Sequential(model, nn.Identity())
        start = time.process_time()
        assert find_repeated_blocks(model) == {nn.Linear}  # the innermost Sequential(Linear, Linear)
        return time.process_time() - start

    small = min(timed(1_000) for _ in range(3))
    large = timed(10_000)
    assert large < 30 * max(small, 1e-3), (small, large)  # ten times deeper: linear ~10x, quadratic ~100x
