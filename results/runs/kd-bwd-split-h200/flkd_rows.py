"""ours at 384 rows a product and a group (the larger groups' earlier setting), for one bench run beside 376."""
from ligerbench.kernels.fused_linear_distill import fused_linear_distill


def rows_384(*args, **kwargs):
    return fused_linear_distill(*args, chunk_rows=384, **kwargs)
