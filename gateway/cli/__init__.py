"""``tiergate``'s command line: serving and config checks (``main``), the classifier's
offline commands (``classifier``), the feedback loop's (``feedback``)."""
