"""`bench` of `flp`: not declared yet (SPEC None): `ligerbench bench --kernel flp` says so."""

SPEC = None
VARIANTS = ()
