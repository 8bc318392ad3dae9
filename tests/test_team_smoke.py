"""A team's platform smoke sets: acme/widgets (tests/fake_team_history.py) runs its tests on three
platforms, with a test that times out now and then on Ubuntu and passes when re-run. Its sets come out
empty, and that is the answer: a smoke set is the tests failing on one platform significantly more
than elsewhere, chosen from evidence alone (nothing to configure), and a test that passes on a re-run
is a flaky test for the disabled list, not one failing its platform's jobs. Each platform gets its
file all the same, saying what it takes to enter it, and the documentation says why a set is empty
with the figures the code uses."""

from __future__ import annotations

import json
import re
from pathlib import Path

from test_team_tests import DAYS
from test_team_tests import outputs as outputs  # the team's history through backfill and `torchci run`

from resources.lake import Lake, connect
from torchci_assets.derived.flakiness.flaky import MIN_FLAKE_EVENTS
from torchci_assets.derived.flakiness.smoke import (
    SMOKE_DIR,
    SMOKE_MIN_EXCLUSIVE_SHAS,
    SMOKE_MIN_FAILURE_RATE,
    SMOKE_MIN_RUNS,
)

DOCS = Path(__file__).resolve().parents[1] / "docs" / "outputs.md"


def test_each_of_the_team_s_platforms_gets_an_empty_set_saying_what_it_takes(outputs):
    sets = {p.stem: json.loads(p.read_text()) for p in (outputs / SMOKE_DIR).glob("*.json")}
    assert sorted(sets) == ["linux", "mac", "win"]
    for document in sets.values():
        assert document["tests"] == []
        assert document["criteria"]["min_runs"] == SMOKE_MIN_RUNS
        assert document["criteria"]["min_exclusive_failing_shas"] == SMOKE_MIN_EXCLUSIVE_SHAS


def test_the_flaky_test_is_flake_evidence_on_its_platform_not_smoke_evidence(outputs):
    """What the sets were chosen from: the timed-out test flaked on linux alone, in fewer runs than a
    set needs, so it enters no set (and the lake's smoke_tests has no row)."""
    lake = Lake.at(str(outputs.parent / "lake"))
    day = DAYS[-1].isoformat()
    con = connect()
    lake.register(con, "flaky_test_platforms", [day], name="ev")
    rows = con.execute("SELECT platform, runs, flake_events FROM ev WHERE name = 'test_sync_widget' "
                       "ORDER BY platform").fetchall()
    flaky = {platform: (runs, flakes) for platform, runs, flakes in rows}
    assert sorted(flaky) == ["linux", "mac", "win"]
    assert flaky["linux"][1] == 3 and flaky["mac"][1] == flaky["win"][1] == 0
    assert all(runs < SMOKE_MIN_RUNS for runs, _ in flaky.values())
    assert lake.rows_in(lake.files("smoke_tests", [day])) == 0


def test_the_documentation_says_why_a_set_is_empty_with_the_code_s_figures():
    """A user reading an empty set learns it is an answer, and what would put a test in it."""
    text = " ".join(DOCS.read_text().split())
    section = text[text.index("## Smoke-test sets"):]
    section = section[:section.index(" ## ")]
    assert "empty" in section and "nothing to configure" in section
    figures = re.findall(r"\d+%?", section)
    for figure in (str(SMOKE_MIN_RUNS), str(SMOKE_MIN_EXCLUSIVE_SHAS), f"{SMOKE_MIN_FAILURE_RATE:.0%}",
                   str(MIN_FLAKE_EVENTS)):
        assert figure in figures, (figure, section)
