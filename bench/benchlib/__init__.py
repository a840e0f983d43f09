"""Building blocks of the project's benchmarks (``bench/run.py``): reports, process statistics,
Prometheus scraping, the benchmark cluster and the benchmarks themselves.

Not an installed package: ``bench/run.py`` puts ``bench/`` on ``sys.path``.
"""
