"""``python -m kvnode check``: a Jepsen-style check of a cluster, above the tooling (kvnode.ops) it starts
clusters with. The command line (cli) and a run (runner: workers, progress, the heal, the verdicts); the
history (history: Jepsen-shaped JSON lines) and what one request saw (calls); the workloads (workloads) and
their checkers, pure functions of a history (set_full, register, linearizable), each returning a verdict
(verdict); the faults (nemesis: the schedule; local: a cluster the check started, remote: a running one,
which allows only a membership change; netns: partitions between network namespaces, disk: a full tmpfs,
both as root); the report (report: report.md, plots: matplotlib's timeline and latency plots). See
docs/check.md. The server never imports it."""
