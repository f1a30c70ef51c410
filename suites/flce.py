"""Suites of the `flce` kernel: loss, gradients of hidden and weight, gradient of the bias (bias
cases only, so a case without bias yields no empty rows), and the unchanged-inputs contract."""

from ligerbench.registry import Suite
from ligerbench.suites.flce_grid import flce_cases


def _bias_cases(preset: str, device_type: str):
    return [c for c in flce_cases(preset, device_type) if c.bias]


SUITES = (
    Suite(
        name="flce_correctness",
        kernel="flce",
        description="loss of hidden @ weight.T + bias (and separately reported z-loss) vs float64",
        quantities=("loss", "z_loss"),
        cases=flce_cases,
    ),
    Suite(
        name="flce_gradients",
        kernel="flce",
        description="gradients of hidden and weight vs the float64 reference",
        quantities=("grad_hidden", "grad_weight"),
        cases=flce_cases,
    ),
    Suite(
        name="flce_bias_gradients",
        kernel="flce",
        description="gradient of the bias vs the float64 reference (cases with a bias)",
        quantities=("grad_bias",),
        cases=_bias_cases,
    ),
    Suite(
        name="flce_contracts",
        kernel="flce",
        description="hidden, weight and bias are unchanged unless the provider declares it writes them",
        quantities=("input_unchanged",),
        cases=flce_cases,
    ),
)
