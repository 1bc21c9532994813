"""Third-party code copied in, unchanged but for imports: NLTK's Porter stemmer (``porter``)."""
