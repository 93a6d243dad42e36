"""Load testing for kvnode: Locust users, open-loop constant-rate load, and the fan-out comparison.

    python -m loadtest rate --url URL[,URL...] --op put|get|delete|mixed --rate R --duration S [--workers N]
    python -m loadtest fill --url URL --keys N
    python -m loadtest compare [--quick] [--out DIR]
    python -m loadtest selfbench
    python -m loadtest ui
    locust -f loadtest/locustfile.py --host URL

Modules, one job each:

    interruptible uvloop.run that Ctrl-C and SIGTERM stop at once
    workload      keys, values and the request of each operation (shared by all generators)
    httpclient    the generator's lean keep-alive HTTP/1.1 connection (asyncio.Protocol)
    openloop      the constant-rate scheduler, its latency accounting and validity rule; the filler
    workers       one run spread over several generator processes, results merged
    selfbench     the generator's own capacity against the hello-world app (``make genbench``)
    locustfile    Locust users (closed loop: for the UI and everyday load, not for latency figures)
    scenarios     fresh 3-node clusters: healthy, slow-replica, replica-down
    delay_proxy   the TCP proxy that makes a replica slow
    compare       the pipeline: every scenario and mode, common rates, the capacity search
    report        report.md, its conclusion and the plots
    ui            a local cluster with Locust's web UI pointed at it
    bench, hello  wrk against the cluster next to an aiohttp hello-world (``make bench``)

Latency histograms are kvnode.metrics.LatencyHistogram, the same as the nodes' own.
"""
