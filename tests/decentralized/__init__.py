"""Tests of the decentralized scenario kind (random walk, gossip, local DP, privacy, audit, engines)."""
