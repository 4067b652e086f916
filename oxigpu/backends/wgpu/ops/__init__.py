"""One module per kernel family; importing a module registers its kernels and checks."""
