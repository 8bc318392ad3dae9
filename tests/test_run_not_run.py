"""`torchci run --quiet`'s line of the steps Dagster did not run after a failure (run.logged_lines),
read from a real run's events in a real instance: which steps the run planned and never started,
not the words Dagster logs about them."""

import dagster as dg

from torchci_assets.run import logged_lines


@dg.asset
def fails(context):
    context.log.warning("fails: its own warning, before it raises")
    raise RuntimeError("broken")


@dg.asset(deps=[fails])
def needs_it():
    pass


@dg.asset(deps=[needs_it])
def needs_that():
    pass


@dg.asset
def apart(context):
    context.log.warning("apart: a warning of a step that ran")


@dg.asset
def ok():
    pass


def test_the_steps_after_a_failed_one_are_not_run_and_every_steps_own_warning_is_kept(instance):
    run = dg.materialize([fails, needs_it, needs_that, apart], instance=instance, raise_on_error=False)
    assert not run.success
    warnings, not_run = logged_lines(instance, run.run_id)
    assert not_run == ["needs_it", "needs_that"]  # in the order they would have run
    assert sorted(warnings) == ["      apart: warning: apart: a warning of a step that ran",
                                "      fails: warning: fails: its own warning, before it raises"]
    # Dagster's notes of the steps it did not run are in the log, and said by the line above alone
    notes = [e for e in instance.all_logs(run.run_id) if e.step_key in not_run and e.dagster_event is None]
    assert len(notes) == 2 and all(e.level >= 40 for e in notes)


def test_a_run_without_a_failed_step_has_none_not_run(instance):
    run = dg.materialize([apart, ok], instance=instance)
    assert logged_lines(instance, run.run_id) == (["      apart: warning: apart: a warning of a step that ran"], [])


def test_a_selection_s_unselected_steps_are_not_taken_for_steps_not_run(instance):
    run = dg.materialize([fails, needs_it, needs_that, apart], selection=["fails", "apart"], instance=instance,
                         raise_on_error=False)
    assert logged_lines(instance, run.run_id)[1] == []


def test_the_line_holds_when_dagster_words_its_note_otherwise(instance, monkeypatch):
    """Dagster's note of a step it does not run ("Dependencies for step ... Not executing.") is its
    own wording, which an upgrade may change: reworded here, the steps are still said, and the note
    is still not taken for a step's own error."""
    from dagster._core.log_manager import DagsterLogManager

    error = DagsterLogManager.error

    def reworded(self, msg, *args, **kwargs):
        if msg.startswith("Dependencies for step "):
            msg = "Upstream of this step failed; skipping."
        return error(self, msg, *args, **kwargs)
    monkeypatch.setattr(DagsterLogManager, "error", reworded)
    run = dg.materialize([fails, needs_it, needs_that], instance=instance, raise_on_error=False)
    assert [e.user_message for e in instance.all_logs(run.run_id)].count("Upstream of this step failed; skipping.") == 2
    warnings, not_run = logged_lines(instance, run.run_id)
    assert not_run == ["needs_it", "needs_that"]
    assert warnings == ["      fails: warning: fails: its own warning, before it raises"]
