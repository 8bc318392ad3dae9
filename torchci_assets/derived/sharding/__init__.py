"""Test times and shard plans, in PyTorch's formats."""
