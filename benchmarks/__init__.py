"""Speed benchmarks against the alternatives: ``python -m benchmarks`` (see benchmarks/run.py)."""
