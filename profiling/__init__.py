"""profiling: where a kvnode request's time and memory go, under constant-rate load, sync next to async.

``python -m profiling record`` profiles one fan-out mode and operation; ``python -m profiling compare``
profiles sync and async x PUT and GET and writes report.md. The modules, in the order a run uses them:

    children   every process started, kept by PID, ended on stop or Ctrl-C
    cluster    3 kvnode nodes on free loopback ports (kvnode.ops.local_cluster), some under memray run
    load       the load-testing pipeline's CLI (python -m loadtest fill|rate), bounded in time
    pyspy      py-spy: the ptrace check, recorders (CPU, --idle, --gil), dumps
    memory     memray captures: HTML flamegraphs, the allocations made during the load
    batching   the coordinator's /metrics before and after a phase: requests, frames and calls sent
    record     one run: its load phases and what each one records (run.json)
    collapsed  collapsed stacks and the top-frame tables (self and total share)
    cpu        CPU per request from /proc next to py-spy's samples: a table and a plot
    conclusion what the runs' CPU lets the report conclude, and what falls short
    report     report.md from the runs
    flamegraph a flamegraph drawn as one SVG from collapsed stacks
    render_check  each written page rendered offline in headless Chromium: drawn, and nothing fetched

``python -m profiling counts`` measures a request's allocations, system calls and replica frames at the
coordinator, and its Python calls at a node of one: figures for a before/after that a busy machine does
not move. Its modules, besides cluster, memory, batching and collapsed above:

    closed_loop   a bounded closed-loop load: N requests over connections opened once
    python_calls  Python calls per request at a node of one served in this process, under cProfile
    counts        the phases, and the table of counts per request

``python -m profiling.transport`` (transport) times the replica channel over loopback TCP against a Unix
socket.
"""
