"""Research tools on top of training: analysis of a run, sweeps, benchmarks.

  analysis.py      scale diagnostics of a checkpoint: tables, JSON, plots (scripts/analyze.py)
  sweeps/          grids of runs, their statistics and reports (scripts/sweep.py)
  benchmarking.py  speed against the machine's limit: MFU, decoding, data (scripts/benchmark.py)
  findings.py      the findings page's generated figures and tables (scripts/findings.py)
  variance_argument.py  Question 5 read per layer from committed sweep results, without jax
"""
