"""The leaderboard layer: the committed studies' result tables as a static site, above the
report layer (whose statistics it shows) and below the command line; it runs nothing.

``studies`` finds and reads the studies of a results folder, ``board`` makes each study's
board per task, ``figures`` draws it, ``claims`` reads the claims list, ``card`` the fidelity
card, ``html`` and ``pages`` write the pages, and ``site`` builds it all: ``build_site``.
"""

from vaco_jax.leaderboard.site import build_site

__all__ = ["build_site"]
