"""Test support shared by tests/ and bench/: not part of the product.

One fake OpenAI upstream with fault injection (``upstream``), a gateway running on a free
loopback port, in process or as ``tiergate serve`` (``gateways``), tier engine nodes
(``nodes``), the configs and keys they start from (``configs``), a tiny random Llama for
vLLM (``tiny_llama``), an upstream MCP server built with the SDK (``mcp_upstream``) and
its processes (``mcp_servers``), and the count of what a request leaves in reference cycles
(``cycles``). Installed with the package in dev mode (``pip install -e .``);
nothing under gateway/, routers/, backends/ or policies/ imports it.
"""
