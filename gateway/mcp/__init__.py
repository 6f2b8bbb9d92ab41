"""``/mcp``: an MCP gateway over the upstream MCP servers of the policy, under the same
keys, allowlists, rate limits, budgets, ledger, traces and metrics as model calls
(docs/mcp.md)."""
