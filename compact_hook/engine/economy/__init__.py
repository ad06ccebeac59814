"""What a request costs and saves: ``costs`` (one request's economy; prices refine the token rules,
never switch them on) and ``prompt_cache`` (what the provider reported of each conversation's cache)."""
