"""What one gateway process shares with the rest of a deployment: nodes, reloads."""
