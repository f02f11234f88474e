"""The webhook's rules, one module per concern. Each is a pure function of the objects (old and new as
the API server sends them), who is writing, and at most one looked-up object; each returns Problems.
"""
