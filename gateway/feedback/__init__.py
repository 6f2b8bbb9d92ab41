"""``POST /v1/feedback``: a client's verdict on one of its answers (the loop that learns
from it is ``gateway.learning``)."""
