"""Money: what a request may cost, and the hold that reserves and settles it."""
