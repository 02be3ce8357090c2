"""Tests of the offline data layer: partitions, file loaders, the public set."""
