"""The infrastructure the layers above share, outside any compiled program: atomic files, a
folder's manifest and lock, a run folder's files, provenance, the user's cache folder, Orbax
confined to one process and the fault-injection hook. It knows no testbed."""
