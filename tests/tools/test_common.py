"""Shared tool plumbing (mrconvnext.tools.common): the evaluation shards of a distributed evaluation."""

import pytest
import torch

from mrconvnext.tools.common import EvalShard


class Items(torch.utils.data.Dataset):
    def __init__(self, n: int) -> None:
        self.n, self.transform = n, None

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if not 0 <= i < self.n:
            raise IndexError(i)
        return i if self.transform is None else self.transform(i)


@pytest.mark.parametrize('n, world', [(7, 2), (359, 2), (10, 3), (3, 3)])
def test_shards_hold_every_sample_once(n, world):
    data = Items(n)
    shards = [EvalShard(data, r, world) for r in range(world)]
    seen = sorted(x for s in shards for x in (s[i] for i in range(len(s))))
    assert seen == list(range(n)) and max(map(len, shards)) - min(map(len, shards)) <= 1


def test_the_transform_is_the_datasets():
    data = Items(5)
    shard = EvalShard(data, 1, 2)
    shard.transform = lambda i: -i  # what timm.data.create_loader does
    assert data.transform is shard.transform and [shard[i] for i in range(len(shard))] == [-1, -3]


@pytest.mark.parametrize(
    'n, rank, world, match',
    [(2, 0, 3, '2 evaluation samples cannot give each of 3'), (5, 2, 2, 'expected 0 <= rank < world_size')],
)
def test_bad_shards_are_clear_errors(n, rank, world, match):
    with pytest.raises(ValueError, match=match):
        EvalShard(Items(n), rank, world)
