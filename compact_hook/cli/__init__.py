"""``compact-hook``: the operator's command line (count, check, replay, archive, config).

Nothing here is imported by the proxy: rich and (for plots) matplotlib stay off its path.
"""
