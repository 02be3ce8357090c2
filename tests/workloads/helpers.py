"""Helpers the workload tests share."""


def resumed_and_uninterrupted(make, split_at: int, total: int):
    """Two fresh workloads from ``make()``: one trained ``split_at`` steps, saved, loaded into a third
    and trained on to ``total``; one trained ``total`` steps straight. A resume test asserts they agree."""
    straight = make()
    straight.train(total)
    split = make()
    split.train(split_at)
    restored = make()
    restored.load_state_dict(split.state_dict())
    restored.train(total - split_at)
    return restored, straight
