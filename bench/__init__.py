"""Benchmarks (not tests): each runs as `python bench/NAME.py` and writes bench/results/NAME.json."""
