"""Tests for testbed.pretrain: document packing and outlier-efficient attention."""
