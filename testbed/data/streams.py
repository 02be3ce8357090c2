"""The seed streams of the data every kind splits the same way (`testbed.seeding.stream`).

The federated and decentralized kinds draw these at the root of the run's tree; a workload draws
its own under its ``workload`` child.
"""

from __future__ import annotations

from testbed.seeding import stream

SPLIT = stream("data.split", "which samples of the dataset are held out for testing")
PARTITION = stream("data.partition", "which training samples each client or node holds")
