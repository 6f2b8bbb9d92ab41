"""The admin family: the cost dashboard at ``/admin``, its JSON API, and the admin API at
``/admin/api/*`` (keys, tenants, budgets, cache, learning, audit, policy reloads)."""
