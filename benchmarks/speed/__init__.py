"""Speed benchmarks: env and learner throughput, contention, cores, the cost model."""
