"""Page parts: what several pages draw (the sidebar, sign-in, labels, failure cards, saved reports …)."""
