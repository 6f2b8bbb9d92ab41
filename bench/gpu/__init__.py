"""GPU checks (not CI): short prepared scripts for a lent accelerator."""
