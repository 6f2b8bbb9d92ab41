"""``routing.feedback``: shadow answers, the judge, client verdicts, records and refits."""
