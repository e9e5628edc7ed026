"""Synthetic traces of a Megatron-style job, for the demo, the tests and the benchmarks.

:mod:`~streamtrace.synth.job` writes every rank of a TP x CP x EP x DP x PP job
(:class:`~streamtrace.synth.job.SynthSpec`, :func:`~streamtrace.synth.job.generate_job`) with the
ground truth of what it wrote; :mod:`~streamtrace.synth.scale` writes 1,000+ ranks from a few
programs, in parallel; :mod:`~streamtrace.synth.groups` gives the jobs' process groups.  Nothing in
the analysis depends on this package: it sits beside the stages as a tool for them.
"""
