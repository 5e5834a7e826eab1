"""End to end in simulation: 'put the <block> in the <bowl>' in 20 seeded scenes, judged by ground truth."""

from __future__ import annotations

import pytest
from timing import pytest_timeout, timeout

pytestmark = pytest.mark.timeout(pytest_timeout(1200))


def test_put_block_in_bowl_in_20_seeded_scenes(client):
    successes, failures = 0, []
    for seed in range(100, 120):
        reply = client.reset(seed=seed, timeout=timeout(30))
        assert reply.success, reply.message
        names = [o.name for o in reply.objects]
        block = next(n for n in names if n.endswith(" block"))
        bowl = next(n for n in names if n.endswith(" bowl"))
        result = client.call("put_first_on_second", timeout=timeout(120), object_name=block, target_name=bowl)
        truth = {o.name: o for o in client.world_state().objects}[block]
        ok = truth.supported_by == bowl and truth.inside and not truth.held
        assert result.success == ok or not result.success, f"seed {seed}: skill claimed success but {block} is not in {bowl}"
        successes += ok
        if not ok:
            failures.append(f"seed {seed}: {result.message}")
    assert successes >= 19, failures
