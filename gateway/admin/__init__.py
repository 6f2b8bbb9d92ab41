"""The admin side: the cost dashboard at ``/admin`` and its JSON API at ``/admin/api/*``."""
