"""`voxgate bench`: the serving benchmark (docs/benchmarking.md).

    workload.py    the TTS workload and open-loop (Poisson) request plans
    records.py     what the client records for one request (plain data)
    metrics.py     TTFA percentiles, streaming viability, underrun time (pure functions)
    loadgen.py     the WebSocket load generator (asyncio, optional worker processes)
    goodput.py     the search for the highest rate that meets the SLO
    capacity.py    `--capacity`: how many sessions fit, staggered, with frames on time
    engine_loop.py the serving engine loop's time totals, read from the server's /metrics
    admission_view.py  real-time admission's refusals by cause and predicted capacity, from /metrics
    metrics_sampler.py a server's /metrics scraped once a second through a point
    throughput.py  throughput RTF, measured through the engine surface directly
    per_request.py what the per-request baselines share: one request at a time, the engine surface
    baselines.py   which baseline serves a model
    orpheus_reference.py  Orpheus's reference decoding scheme and token constraint for generate()
    hf_baseline.py Orpheus's per-request Hugging Face baseline
    cosyvoice_baseline.py  CosyVoice 2's per-request baseline
    zonos_reference.py  the Zonos package's generate() rules: delayed grid, sampler, codes out
    zonos_stablelm.py   Zonos' transformer backbone as transformers' StableLmModel
    zonos_baseline.py   Zonos v0.1's per-request baseline
    baseline_server.py  `python -m voxbench.baseline_server`: a baseline over WebSocket
    servers.py     starting / stopping the systems under test as subprocesses
    report.py      the results JSON and the plot
    config.py      the typed, validated settings of a run
    runner.py      one benchmark run, end to end
    cli.py         the `voxgate bench` options

Dependencies point one way: this package imports gateway, engine and models; none of them
imports it (`gateway/cli.py` registers the sub-command when it builds its parser). The
standalone measurement scripts, the workload file and the raw results live in `bench/`.
The load generator imports no torch so that its worker processes start fast.
"""
