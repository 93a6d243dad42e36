"""kvnode.healing.outcomes: a full repair's one-line summary and JSON say what each exchange did, naming
the peers not repaired and why; the totals' figures render as /v0/stats and /metrics show them."""

from __future__ import annotations

from kvnode.healing.outcomes import REPAIR_FIGURES, PeerOutcome, RepairRun, RepairTotals


def test_a_runs_summary_adds_up_its_exchanges_and_names_the_peers_not_repaired() -> None:
    run = RepairRun(("http://b:1", "http://c:1"), started=100.0)
    run.outcomes["http://b:1"] = PeerOutcome("http://b:1", True, "", 8, 2, 5, 3, 0, 0.5)
    run.outcomes["http://c:1"] = PeerOutcome("http://c:1", reason="unreachable", segments_compared=1)
    assert run.unreached == ["http://c:1"]
    assert not RepairRun(("http://b:1",)).done  # until it ends
    run.ended = 102.5
    assert run.summary() == (
        "repaired with 1 of 2 peers: 9 segments compared (2 differing), 5 records sent, 3 received, "
        "in 2.5 s; not repaired: http://c:1 (unreachable)"
    )
    shown = run.to_json()
    assert shown["seconds"] == 2.5 and shown["unreached"] == ["http://c:1"] and shown["done"] is True
    assert shown["outcomes"]["http://b:1"]["sent"] == 5


def test_a_run_where_every_peer_was_repaired_names_none() -> None:
    run = RepairRun(("http://b:1",), started=0.0, ended=1.0)
    run.outcomes["http://b:1"] = PeerOutcome("http://b:1", completed=True)
    assert run.summary().endswith("0 records sent, 0 received, in 1.0 s")


def test_the_totals_figures_nest_the_records_by_direction() -> None:
    totals = RepairTotals(sent=4, received=2, refused=1, segments_compared=7)
    totals.exchanges["completed"] = 3
    reading = REPAIR_FIGURES.read(totals)
    assert reading.json() == {
        "exchanges": {"completed": 3, "failed": 0},
        "segments_compared": 7,
        "segments_differing": 0,
        "records": {"sent": 4, "received": 2, "refused": 1},
    }
    sent = next(row for row in REPAIR_FIGURES.rows if row.source == "sent")
    assert sent.samples(reading.values["sent"], []) == [(("sent",), 4)]
