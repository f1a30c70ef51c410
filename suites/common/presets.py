"""Named sizes of a run. `quick` fits CI (CPU, Triton's interpreter, a few minutes);
`full` is for a GPU (larger shapes, fp16, the Llama-3 vocabulary)."""

from ligerbench.registry import Preset

PRESETS = (
    Preset(name="quick", description="small shapes for CPU through Triton's interpreter (CI)"),
    Preset(name="full", description="GPU shapes up to V=256000, fp16 included"),
)
