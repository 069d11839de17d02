"""`voxgate bench`: the serving benchmark of BENCHMARK.md.

    workload.py    the TTS workload and open-loop (Poisson) request plans
    records.py     what the client records for one request (plain data)
    metrics.py     TTFA percentiles, streaming viability, underrun time (pure functions)
    loadgen.py     the WebSocket load generator (asyncio, optional worker processes)
    goodput.py     the search for the highest rate that meets the SLO
    throughput.py  throughput RTF, measured through the engine surface directly
    orpheus_reference.py  Orpheus's reference decoding scheme and token constraint for generate()
    hf_baseline.py the per-request Hugging Face baseline behind the same engine surface
    baseline_server.py  `python -m gateway.bench.baseline_server`: that baseline over WebSocket
    servers.py     starting / stopping the systems under test as subprocesses
    report.py      the results JSON and the plot
    config.py      the typed, validated settings of a run
    runner.py      one benchmark run, end to end
    cli.py         the `voxgate bench` options

Nothing here is imported by the gateway itself; the load generator imports no torch so that
its worker processes start fast.
"""
