"""The scan's heap tuning: inside `large_blocks_kept()` a large block freed and allocated again
reuses its pages instead of faulting in new ones (the kernel time it saves, see heap.py)."""

import resource

from torchci_assets.ingest.heap import large_blocks_kept

BLOCK = 8 << 20  # an inflated chunk
PAGES = BLOCK // resource.getpagesize()


def _faults_allocating(times: int) -> int:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(times):
        block = b"x" * BLOCK  # malloc, then every page written
        del block
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def test_large_blocks_reuse_their_pages_inside():
    with large_blocks_kept() as tuned:
        assert tuned
        _faults_allocating(1)  # the first block is faulted in once
        faults = _faults_allocating(20)
    assert faults < 2 * PAGES, f"{faults} page faults for 20 blocks of {PAGES} pages: pages not reused"
