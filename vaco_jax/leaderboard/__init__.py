"""The leaderboard layer: the committed studies' result tables as a static site, above the
report layer (whose statistics it shows) and below the command line; it runs nothing.

``studies`` finds and reads the studies of a results folder, ``tags`` what each study is,
``board`` makes each study's board per task, ``figures`` draws it, ``claims`` reads the claims
list, ``card`` the fidelity card, ``html`` and ``pages`` write the pages, ``index`` the
experiments index, and ``site`` builds it all: ``vaco_jax.leaderboard.site.build_site``. The
package imports none of them itself, so that reading its tags does not load the drawing.
"""
