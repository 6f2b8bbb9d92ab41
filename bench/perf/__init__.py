"""Performance benchmarks: CPU, latency and throughput, as ratios in one run."""
