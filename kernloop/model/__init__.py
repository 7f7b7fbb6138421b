"""A user's model in: its operators captured under torch.profiler into operator cards, and ranked by what each could gain the whole model (Amdahl)."""
