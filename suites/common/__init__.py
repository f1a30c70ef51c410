"""What every kernel's suites draw on, whatever its family: the all-pairs case designs
(`covering`), the presets (`presets`), the model code's rounding (`rounding`), the device's tanh
(`device_tanh`), the known numerical patterns a failure names (`hints`), torch.compile as a
provider (`compiled`), the bench's model heads (`bench_shapes`) and plain PyTorch peers
(`bench_peers`), a kernel's KernelSpec from its spec.py (`registration`), and the checks and
planted bugs several kernels share: the caller's inputs untouched (`input_mutants`), a step split
over ranks or micro-batches (`split_step`), backward run twice on one forward
(`retained_backward`)."""
