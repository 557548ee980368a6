"""`python -m fedjax_het` is the `fedjax-het` command (one XLA device per CPU core too)."""
from fedjax_het.cli import console_main

if __name__ == '__main__':
  console_main()
