"""`bench` of `lp`: not declared yet (SPEC None): `ligerbench bench --kernel lp` says so."""

SPEC = None
VARIANTS = ()
