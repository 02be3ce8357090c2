"""Tests for the strategies package (robust rules, attacks, SDEA, Flower strategies)."""
