"""Load testing for kvnode: Locust users, open-loop constant-rate load, and the fan-out comparison.

    python -m loadtest rate --url URL[,URL...] --op put|get|delete|mixed|cas --rate R --duration S
        [--workers N] [--routing token-aware|round-robin]  # each key to its first owner, or over --url
    python -m loadtest fill --url URL --keys N
    python -m loadtest compare [--quick] [--out DIR]
    python -m loadtest report --out DIR
    python -m loadtest scale [--members 3,6,12 | --machines 3 --per-host 1,4] [--rate 300] [--out DIR]
    python -m loadtest selfbench
    python -m loadtest.ladder --url URL [--start 4000 --step 2000]
    python -m loadtest stalls [--keys 50000] [--rate 200]
    python -m loadtest healing|join|backup [--keys 100000] [--rate 1000]
    python -m loadtest wan [--round-trip-ms 50] [--rate 300] [--duration 20] [--rounds 3]  # root
    python -m loadtest ui
    python -m loadtest locust [--duration 30] [--out out/loadtest]
    locust -f loadtest/locustfile.py --host URL

Modules, one job each:

    interruptible uvloop.run that Ctrl-C and SIGTERM stop at once
    workload      keys, values and the request of each operation (shared by all generators)
    httpclient    the generator's lean keep-alive HTTP/1.1 connection (asyncio.Protocol)
    openloop      the constant-rate scheduler: each request sent at its intended time
    rate_result   what a run measured (latency from the intended times, lateness, errors) and its validity
    workers       one run spread over several generator processes, results merged
    selfbench     the generator's own capacity against the hello-world app (``make genbench``)
    fill          the filler every command uses: each key PUT once, failed PUTs sent again
    locustfile    the Locust user and its workloads (closed loop: for the UI and everyday load, not for
                  latency figures)
    scenarios     fresh 3-node clusters: healthy, slow-replica, replica-down
    delay_proxy   the TCP proxy that makes a replica slow
    compare       the pipeline: every scenario and mode, common rates, a capacity search each
    capacity      a rate's verdict and the capacity search (pure)
    replica_calls the nodes' replica-call counters, and the calls a run made per request
    report        report.md and its conclusion, drawn from the runs alone
    plots         its plots, one style per mode in every plot (and the scaling report's, by shape)
    scale         the same constant-rate load on clusters of 3, 6 and 12 members (or machines x members):
                  throughput, p99, replica calls and server CPU per request for each
    scale_figures its figures by shape: median, range and samples of each (pure)
    scale_report  its report and conclusion, drawn from the runs alone
    locust_cluster  a filled local cluster under Locust: its web UI, or a headless run with reports
    bench, hello  wrk against the cluster next to an aiohttp hello-world (``make bench``)
    bench_conditional  make bench's conditional-write rows: uncontended against a plain PUT, contended
    targets       what bench loads: the hello-world, and a filled cluster per fan-out mode and guard
    ladder        the highest constant rate a running cluster holds, rung by rung
    stalls        each node's worst event-loop lag during each long job (``python -m loadtest stalls``)
    windows       a measurement under load in windows: their figures, table, p99 plot and report, which
                  healing, join and backup share
    healing       a wiped node rebuilt under load, and an idle cluster's repair traffic
    join          a 4th node joining a filled cluster under load
    backup        a backup and restores of a filled cluster under load
    wrk           running wrk: install, Lua script, output parsing, runs at once merged
    netns         hosts made of network namespaces: on one bridge, or two datacenters behind a router
                  that delays what crosses (the WAN test bed; tests/namespaces.py builds on it)
    wan_delay     the bed's delay line: packets read from a TUN device, held half a round trip, written back
    wan           latency by consistency level on the bed: one datacenter against two (``python -m
                  loadtest wan``)
    wan_figures   its clusters' shapes, what was asked and measured (wan.json), a run's percentiles (pure)
    wan_report    its report and plot, drawn from the runs alone

Latency histograms are kvnode.metrics.LatencyHistogram, the same as the nodes' own.
"""
