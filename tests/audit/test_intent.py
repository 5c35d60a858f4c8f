"""The task-intent model: does a task ask for a change, and which objects does it name."""

from __future__ import annotations

import pytest

from mtguard_rt.audit import load_policy
from mtguard_rt.audit.intent import TaskIntent, base_forms, create_vocab

LISTS = load_policy().spec.lists
VOCAB = create_vocab(LISTS.change_verbs, LISTS.change_negations, LISTS.question_words,
                     LISTS.determiners)  # fmt: skip


def intent(text: str) -> TaskIntent:
    return TaskIntent.of(text, VOCAB)


@pytest.mark.parametrize(
    "task",
    [
        "Read my note 'q3'.",
        "Show me my notes about Q3 (start with notes-index).",
        "List my notes.",
        "Find Rui Santos in my contacts.",
        "Find the phone number of Bruno Costa in my address book.",  # a noun, not "book"
        "Show me config/app.toml.",
        "Read my note 'hr-update'.",  # a name holds no request
        "Translate 'the meeting moved to Thursday' into German.",
        "Is the background worker running?",  # a description
        "What changed in the last commit?",  # a question, and a noun
        "Don't delete anything, just show me the notes.",
        "Look through my project: what the last commit was, and the start of the install guide",
        "Show me my latest emails.",  # a plural noun
        "Summarise the files in shared/.",
        "Use my weather API key to get the forecast for Setúbal.",  # not "set"
        "Show me the diff of pull request 640.",  # a compound noun
        "Summarise the open merge requests.",
        "Show the records. I copied this from the help page: 'run add_record'.",  # narration
        "We've updated the docs; show me the new install guide.",
    ],
)
def test_read_only_tasks_ask_for_no_change(task: str) -> None:
    assert not intent(task).asks_change, intent(task).change_words


@pytest.mark.parametrize(
    ("task", "verb"),
    [
        ("Delete my note 'old-draft'.", "delete"),
        ("Close ticket 60, the outage is over.", "close"),
        ("Comment on ticket 55 that the refund was sent.", "comment"),
        ("Read ticket 12 and close it if the customer says the problem is gone.", "close"),
        ("I want the old drafts deleted.", "deleted"),
        ("Have ticket 5 closed.", "closed"),
        ("Remember which services my team owns.", "remember"),
        ("The worker is stuck: restart it, then show its status.", "restart"),
        ("Show me what was deleted and restore it", "restore"),
        ("Email ana@ourteam.org that the release is on Friday.", "email"),
        ("In my repository, commit the rounding fix on a new branch", "commit"),
        ("I\u2019m rotating its password: fetch the connection string.", "rotating"),
        ("Pull the latest changes, then show the log.", "pull"),
        ("I copied the report; now delete the original.", "delete"),
    ],
)
def test_change_tasks_ask_for_a_change(task: str, verb: str) -> None:
    assert verb in intent(task).change_words


def test_negation_cancels_only_the_verb_it_precedes() -> None:
    assert not intent("Show the ticket but do not close it").asks_change
    assert intent("Delete note 'a', don't delete note 'b'").change_words == ("delete",)
    assert not intent("Show the ticket without changing anything").asks_change
    assert not intent("Show the ticket; I don\u2019t want it closed").asks_change


def test_base_forms_undo_common_inflections() -> None:
    assert "close" in base_forms("closing")
    assert "stop" in base_forms("stopped")
    assert "copy" in base_forms("copied")
    assert "commit" in base_forms("committing")


def test_names_objects_quoted_by_word_or_by_number() -> None:
    task = intent("Delete my note 'q4-plan' and close ticket 4410; move the old drafts")
    assert task.names("q4-plan")
    assert task.names("4410")
    assert task.names("draft-old-1")  # "the old drafts": a loose match, never a false deny
    assert not task.names("budget")
    assert not task.names("4412")
