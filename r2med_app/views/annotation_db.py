"""The annotation store (labels, decisions, the judging queue), opened once per server and again when its
setting changes; a store that is down is reported where the visitor looks and the rest of the app works on.
"""

from __future__ import annotations

import hashlib

import streamlit as st

from r2med_app.views.markup import md
from r2med_core.judging.annotations import AnnotationStore, AnnotationStoreError, default_store_target
from r2med_core.judging.queue import migrate_queue_file


@st.cache_resource(show_spinner=False)
def _store(target_hash: str) -> AnnotationStore:
    return AnnotationStore(default_store_target())


def annotation_store() -> AnnotationStore | None:
    """The annotation database ($R2MED_ANNOTATIONS_URL, else the SQLite file in $R2MED_DATA_HOME or the
    user data folder), opened once per server and again when the setting changes.

    A store that is not usable (or a database server that stopped answering) is reported and left
    untouched; the rest of the app works on. The cache is
    keyed by a hash of the setting, never by the URL itself (it may carry a password). The judging queue
    file of earlier versions, when there is one in the data folder, is moved into the store first.
    """
    try:
        store = _store(hashlib.sha256(str(default_store_target()).encode()).hexdigest())
        if store.path is None:  # a database server: it may be down or unreachable since it was opened
            store.ping()
        for problem in migrate_queue_file(store):
            st.warning(f"The judging queue file: {md(problem)}")
        return store
    except AnnotationStoreError as err:
        st.error(f"Annotations are unavailable: {md(err)}")
        return None
