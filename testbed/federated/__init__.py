"""Federated scenarios on Flower: the ``federated:`` block, client and server apps, strategies and
attacks as scenario plugins, and the robustness report."""
