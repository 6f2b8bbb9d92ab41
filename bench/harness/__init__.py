"""What the benchmarks share: the processes under test, the load generator, the report."""
