"""tilepy.frontend: the kernel language front end, Python AST -> tile IR with source locations."""
