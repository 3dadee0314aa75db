"""Measuring: benchmarks (eager vs fusionlab vs Inductor), timers, device profiles and the workload suite.

One module per concept; import the one you need (this package imports none of them, so that
`fusionlab.inductor` can use `measure.timing` while `measure.bench` uses `fusionlab.inductor`):

    >>> from fusionlab.measure import workloads
    >>> from fusionlab.measure.bench import benchmark      # BenchReport; report.table is a DataFrame
    >>> from fusionlab.measure.suite import run_suite      # the whole workload suite, as CSV and Markdown rows
"""
