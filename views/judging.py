"""Judging: annotators label the pooled unjudged documents blind, one (query, document) at a time."""

from __future__ import annotations

from views import pooling, ui

pooling.judging_page(ui.current_dataset())
