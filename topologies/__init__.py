"""Graphs, random-walk and gossip algorithms, and pairwise network-DP accountants."""
