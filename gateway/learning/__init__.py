"""The feedback loop (``routing.feedback``): shadow answers, the judge, client verdicts,
records and refits: the router learning from the deployment's own traffic."""
