# The expected indices of test_dist.cpp's DistributedSampler case (PyTorch 1.13):
#   /usr/bin/python3 tests/golden/gen_dist_sampler.py
from torch.utils.data import DistributedSampler

ds = list(range(10))
for drop_last in (False, True):
    for r in range(3):
        s = DistributedSampler(ds, num_replicas=3, rank=r, shuffle=True, seed=3, drop_last=drop_last)
        s.set_epoch(2)
        print(f"drop_last={drop_last} rank={r}: {list(s)} len={len(s)}")
