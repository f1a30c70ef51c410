"""Running kernels over several ranks: simulated in one process (simulated.py), or real process
groups started through torch.distributed.run (launch.py; ligerbench/commands/ranks.py is what each rank runs)."""
