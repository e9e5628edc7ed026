"""Synthetic traces of a Megatron-style job, for the demo, the tests and the benchmarks.

``job`` writes every rank of a TP x CP x EP x DP x PP job
(``SynthSpec``, ``generate_job``) with the
ground truth of what it wrote; ``scale`` writes 1,000+ ranks from a few
programs, in parallel; ``groups`` gives the jobs' process groups.  Nothing in
the analysis depends on this package: it sits beside the stages as a tool for them.
"""
