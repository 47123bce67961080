"""Benchmarks: jobyard's throughput and latency, side by side with peer libraries."""
