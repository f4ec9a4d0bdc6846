"""Holds the ``sitecustomize.py`` that ``flameprof run`` puts on children's PYTHONPATH (not imported as a
package)."""
