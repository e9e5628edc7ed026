"""pytest configuration: the shared helpers are in support.py (on the path through setup.cfg)."""
