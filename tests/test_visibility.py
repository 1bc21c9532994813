"""Who sees what (r2med_core.judging.visibility): per role, signed out, and without sign-in."""

from __future__ import annotations

from r2med_core.judging.annotations import Annotation
from r2med_core.judging.identity import AuthConfig, parse_roles, resolve_identity, typed_person
from r2med_core.judging.queue import AnnotatorProgress
from r2med_core.judging.visibility import Sight

CONFIG = AuthConfig(oidc=True)
ROLES = parse_roles(
    '"ann@example.org" = "annotator"\n"rev@example.org" = "reviewer"\n"adm@example.org" = "admin"\n'
    '"both@example.org" = ["annotator", "reviewer"]\n"nobody@example.org" = []\n',
    "roles.toml",
)


def signed_in(email: str | None) -> Sight:
    user = {"is_logged_in": True, "email": email}
    return Sight(None if email is None else resolve_identity(CONFIG, user=user, roles=ROLES), signed_in=True)


def label(annotator: str, query_id: str = "q1", doc_id: str | None = "d1", failure_type: str = "") -> Annotation:
    kind = failure_type or ("not_relevant" if doc_id else "other")
    return Annotation(
        dataset="demo:t", task="t", query_id=query_id, doc_id=doc_id, failure_type=kind, annotator=annotator, note="n"
    )


# Carol and the LLM judge labelled two documents and the whole query q1, and a document of q2.
OTHERS = [
    label("carol", doc_id="d1"),
    label("proposed by some-model", doc_id="d1", failure_type="relevant_unjudged"),
    label("carol", doc_id="d2"),
    label("carol", doc_id=None),
    label("carol", query_id="q2", doc_id="d1"),
]


def test_signed_out_and_no_role_see_no_label_no_review_work_and_no_export() -> None:
    for sight in (signed_in(None), signed_in("nobody@example.org"), Sight(None, signed_in=True)):
        assert sight.labels(OTHERS) == []
        assert not sight.reviews and not sight.exports_store and not sight.blind


def test_an_annotator_sees_others_labels_on_a_document_only_after_judging_it() -> None:
    ann = signed_in("ann@example.org")
    assert ann.blind and not ann.reviews and not ann.exports_store
    assert ann.labels(OTHERS) == []  # before judging: nothing of the others, not even the model's proposal
    assert ann.hidden(OTHERS, ("demo:t", "t", "q1", "d1"))

    mine = label("Ann@Example.org", doc_id="d1")  # names compare case-insensitively
    after = [*OTHERS, mine]
    # d1 is revealed: Carol's label and the model's proposal on it, and her own; not d2, the whole query, q2.
    assert ann.labels(after) == [OTHERS[0], OTHERS[1], mine]
    assert not ann.hidden(after, ("demo:t", "t", "q1", "d1"))
    assert ann.hidden(after, ("demo:t", "t", "q1", "d2")) and ann.hidden(after, ("demo:t", "t", "q1", None))
    assert ann.hidden_queries(after, "demo:t", "t", ["q1", "q2"]) == {"q1", "q2"}


def test_labelling_the_whole_query_reveals_the_query_and_each_of_its_documents() -> None:
    ann = signed_in("ann@example.org")
    whole = label("ann@example.org", doc_id=None)
    after = [*OTHERS, whole]
    assert ann.labels(after) == [*OTHERS[:4], whole]  # everything on q1, nothing on q2
    assert not ann.hidden(after, ("demo:t", "t", "q1", "d2")) and not ann.hidden(after, ("demo:t", "t", "q1", None))
    assert ann.hidden_queries(after, "demo:t", "t", ["q1", "q2"]) == {"q2"}
    # The same ids in another task are another unit.
    assert ann.hidden(after, ("demo:t", "other-task", "q1", "d2"))


def test_reviewers_and_admins_see_every_label_and_only_admins_export_the_store() -> None:
    for email in ("rev@example.org", "both@example.org", "adm@example.org"):
        sight = signed_in(email)
        assert sight.labels(OTHERS) == OTHERS and sight.reviews and not sight.blind
        assert not sight.hidden(OTHERS, ("demo:t", "t", "q1", "d1"))  # never blind: they see every label
    assert signed_in("adm@example.org").exports_store
    assert not signed_in("rev@example.org").exports_store and not signed_in("both@example.org").exports_store


def test_without_sign_in_the_trusted_team_sees_everything() -> None:
    for person in (typed_person("Dana"), None):
        sight = Sight(person, signed_in=False)
        assert sight.labels(OTHERS) == OTHERS and sight.reviews and sight.exports_store
        assert not sight.blind and not sight.hidden(OTHERS, ("demo:t", "t", "q1", "d1"))


def test_judging_progress_is_each_annotators_own_and_the_whole_teams_for_reviewers() -> None:
    rows = [AnnotatorProgress("demo:t", "t", "Ann@Example.org", 3, 1), AnnotatorProgress("demo:t", "t", "carol", 2, 0)]
    assert signed_in("ann@example.org").progress(rows) == rows[:1]  # names compare case-insensitively
    for sight in (signed_in("rev@example.org"), signed_in("adm@example.org"), Sight(typed_person("Dana"), False)):
        assert sight.progress(rows) == rows
    for sight in (signed_in(None), signed_in("nobody@example.org"), Sight(None, signed_in=True)):
        assert sight.progress(rows) == []


def test_the_review_buttons_are_offered_to_reviewers_on_others_labels_only() -> None:
    """Per role, signed out and without sign-in: whom the pages offer the review of a label (the store
    refuses the rest: ``AnnotationStore.review``, ``adjudication.decide``)."""
    carols, revs = [label("carol")], [label("carol"), label(" REV@example.org ")]
    for sight in (signed_in("rev@example.org"), signed_in("adm@example.org"), signed_in("both@example.org")):
        assert sight.may_review(carols) and not sight.labelled(carols)
    assert not signed_in("rev@example.org").may_review(revs) and signed_in("rev@example.org").labelled(revs)
    assert signed_in("adm@example.org").may_review(revs)
    for sight in (signed_in(None), signed_in("nobody@example.org"), signed_in("ann@example.org")):
        assert not sight.may_review(carols)  # signed out, no role, an annotator: no review at all
    # Without sign-in the team is trusted, but a typed name is still the name recorded: not on one's own label.
    assert Sight(None, signed_in=False).may_review(carols)
    assert Sight(typed_person("Dana"), signed_in=False).may_review(carols)
    assert not Sight(typed_person(" Carol"), signed_in=False).may_review(carols)
