"""Median time of one mrconvnext_t training step (b16, 224x224 channels-last, SGD, 2 threads): an A/B probe between
two checkouts, run alternately (``PYTHONPATH=<checkout> python scripts/bench_train_step.py LABEL``)."""

import statistics
import sys
import time

import timm
import torch

import mrconvnext


def main() -> None:
    torch.set_num_threads(2)
    torch.manual_seed(0)
    model = timm.create_model('mrconvnext_t', num_classes=1000).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(16, 3, 224, 224).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (16,))

    def step() -> None:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    step()  # warm-up
    times = []
    for _ in range(6):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    label = sys.argv[1] if len(sys.argv) > 1 else ''
    print(label, mrconvnext.__file__, 'median step s', round(statistics.median(times), 3), [round(t, 2) for t in times])


if __name__ == '__main__':
    main()
