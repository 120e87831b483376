"""Benchmarks that print figures (never timing asserts); `bench.corpus` is the shared data set."""
